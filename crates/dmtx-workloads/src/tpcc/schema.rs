//! TPC-C records, table ids, key packing and the random functions of TPC-C §2.1 and §4.3.2.
//!
//! Records are fixed-size `bytemuck` structs with the spec's column widths (§1.3): money
//! is integer cents (`i64`; numeric(12,2) and smaller), rates are 1/10000 (`u32`;
//! numeric(4,4)), dates are `u64` (0 = null), strings are zero-padded byte arrays of
//! the column's maximum width. Primary-key columns live in the 64-bit key and are not
//! repeated in the value. The largest record is CUSTOMER, 672 B (FORD §6.1, LOTUS §8.1).

use bytemuck::{Pod, Zeroable};
use dmtx_runtime::Table;
use dmtx_store::{attrs, key_hash, Attr};
use rand::Rng;

use crate::zipf::uniform;

/// WAREHOUSE: key (W_ID).
pub const WAREHOUSE_ID: u32 = 0;
/// DISTRICT: key (W_ID, D_ID).
pub const DISTRICT_ID: u32 = 1;
/// CUSTOMER: key (W_ID, D_ID, C_ID).
pub const CUSTOMER_ID: u32 = 2;
/// HISTORY: key (H_W_ID, H_D_ID, coordinator, sequence); the spec gives it no primary key.
pub const HISTORY_ID: u32 = 3;
/// NEW-ORDER: key (W_ID, D_ID, O_ID).
pub const NEW_ORDER_ID: u32 = 4;
/// ORDER: key (W_ID, D_ID, O_ID).
pub const ORDER_ID: u32 = 5;
/// ORDER-LINE: key (W_ID, D_ID, O_ID, OL_NUMBER).
pub const ORDER_LINE_ID: u32 = 6;
/// ITEM: key (I_ID).
pub const ITEM_ID: u32 = 7;
/// STOCK: key (S_W_ID, S_I_ID).
pub const STOCK_ID: u32 = 8;
/// Secondary path, load-time and read-only: (W_ID, D_ID, C_LAST) → C_IDs ordered by C_FIRST.
pub const CUSTOMER_NAME_ID: u32 = 9;
/// Secondary path: (W_ID, D_ID, C_ID) → the customer's last O_ID; written by NewOrder.
pub const LAST_ORDER_ID: u32 = 10;
/// Secondary path: (W_ID, D_ID) → the district's oldest undelivered O_ID; only Delivery
/// writes it.
pub const DELIVERY_CURSOR_ID: u32 = 11;
/// Number of tables.
pub const TABLE_COUNT: u32 = 12;

/// Table names, by id.
pub const TABLE_NAMES: [&str; TABLE_COUNT as usize] = [
    "warehouse",
    "district",
    "customer",
    "history",
    "new_order",
    "order",
    "order_line",
    "item",
    "stock",
    "customer_name",
    "last_order",
    "delivery_cursor",
];

pub(crate) const WAREHOUSE: Table<Warehouse> = Table::new(WAREHOUSE_ID);
pub(crate) const DISTRICT: Table<District> = Table::new(DISTRICT_ID);
pub(crate) const CUSTOMER: Table<Customer> = Table::new(CUSTOMER_ID);
pub(crate) const HISTORY: Table<History> = Table::new(HISTORY_ID);
pub(crate) const NEW_ORDER: Table<NewOrder> = Table::new(NEW_ORDER_ID);
pub(crate) const ORDER: Table<Order> = Table::new(ORDER_ID);
pub(crate) const ORDER_LINE: Table<OrderLine> = Table::new(ORDER_LINE_ID);
pub(crate) const ITEM: Table<Item> = Table::new(ITEM_ID);
pub(crate) const STOCK: Table<Stock> = Table::new(STOCK_ID);
pub(crate) const CUSTOMER_NAME: Table<CustomerName> = Table::new(CUSTOMER_NAME_ID);
pub(crate) const LAST_ORDER: Table<LastOrder> = Table::new(LAST_ORDER_ID);
pub(crate) const DELIVERY_CURSOR: Table<DeliveryCursor> = Table::new(DELIVERY_CURSOR_ID);

/// Districts per warehouse (§4.3.3.1).
pub const DISTRICTS: u32 = 10;
/// Most warehouses: W_ID must fit the 12 low key bits whole.
pub const WAREHOUSES_MAX: u32 = 4095;
/// Fewest and most order lines of an order (§2.4.1.3).
pub const OL_CNT_MIN: u32 = 5;
/// Most order lines of an order.
pub const OL_CNT_MAX: u32 = 15;
/// Distinct last names (§4.3.2.3: three syllables of 0..9).
pub const NAMES: u32 = 1000;
/// Most customers one (warehouse, district, last name) record lists.
pub const NAME_IDS_MAX: usize = 127;
/// Orders StockLevel examines (§2.8.2.2: the last 20).
pub const STOCK_LEVEL_ORDERS: u32 = 20;

/// The address columns WAREHOUSE, DISTRICT and CUSTOMER share (71 B, byte-aligned, so
/// each record's layout is the same as with the columns spelled out).
#[repr(C)]
#[derive(Copy, Clone, Debug, PartialEq, Eq, Pod, Zeroable)]
pub struct Address {
    /// STREET_1.
    pub street_1: [u8; 20],
    /// STREET_2.
    pub street_2: [u8; 20],
    /// CITY.
    pub city: [u8; 20],
    /// STATE.
    pub state: [u8; 2],
    /// ZIP.
    pub zip: [u8; 9],
}

/// WAREHOUSE (96 B).
#[repr(C)]
#[derive(Copy, Clone, Debug, PartialEq, Eq, Pod, Zeroable)]
pub struct Warehouse {
    /// W_YTD, cents.
    pub ytd: i64,
    /// W_TAX, 1/10000.
    pub tax: u32,
    /// W_NAME.
    pub name: [u8; 10],
    /// W_STREET_1, W_STREET_2, W_CITY, W_STATE, W_ZIP.
    pub address: Address,
    /// Padding.
    pub _pad: [u8; 3],
}

/// DISTRICT (104 B).
#[repr(C)]
#[derive(Copy, Clone, Debug, PartialEq, Eq, Pod, Zeroable)]
pub struct District {
    /// D_YTD, cents.
    pub ytd: i64,
    /// D_TAX, 1/10000.
    pub tax: u32,
    /// D_NEXT_O_ID.
    pub next_o_id: u32,
    /// Not a spec column: Payments committed to this district during the run, for the
    /// HISTORY budget (`payments_max`). Payment writes this record anyway (D_YTD).
    pub payments: u32,
    /// D_NAME.
    pub name: [u8; 10],
    /// D_STREET_1, D_STREET_2, D_CITY, D_STATE, D_ZIP.
    pub address: Address,
    /// Padding.
    pub _pad: [u8; 3],
}

/// CUSTOMER (672 B, the largest record).
#[repr(C)]
#[derive(Copy, Clone, Debug, PartialEq, Eq, Pod, Zeroable)]
pub struct Customer {
    /// C_SINCE.
    pub since: u64,
    /// C_CREDIT_LIM, cents.
    pub credit_lim: i64,
    /// C_BALANCE, cents.
    pub balance: i64,
    /// C_YTD_PAYMENT, cents.
    pub ytd_payment: i64,
    /// C_DISCOUNT, 1/10000.
    pub discount: u32,
    /// C_PAYMENT_CNT.
    pub payment_cnt: u32,
    /// C_DELIVERY_CNT.
    pub delivery_cnt: u32,
    /// C_FIRST.
    pub first: [u8; 16],
    /// C_MIDDLE ("OE").
    pub middle: [u8; 2],
    /// C_LAST.
    pub last: [u8; 16],
    /// C_STREET_1, C_STREET_2, C_CITY, C_STATE, C_ZIP.
    pub address: Address,
    /// C_PHONE.
    pub phone: [u8; 16],
    /// C_CREDIT ("GC" or "BC").
    pub credit: [u8; 2],
    /// C_DATA.
    pub data: [u8; 500],
    /// Padding.
    pub _pad: [u8; 5],
}

/// HISTORY (48 B).
#[repr(C)]
#[derive(Copy, Clone, Debug, PartialEq, Eq, Pod, Zeroable)]
pub struct History {
    /// H_DATE.
    pub date: u64,
    /// H_AMOUNT, cents.
    pub amount: i64,
    /// H_C_ID.
    pub c_id: u32,
    /// H_C_W_ID.
    pub c_w_id: u16,
    /// H_C_D_ID.
    pub c_d_id: u8,
    /// H_DATA.
    pub data: [u8; 24],
    /// Padding.
    pub _pad: u8,
}

/// NEW-ORDER (8 B): the table has key columns only; the value repeats NO_O_ID.
#[repr(C)]
#[derive(Copy, Clone, Debug, PartialEq, Eq, Pod, Zeroable)]
pub struct NewOrder {
    /// NO_O_ID.
    pub o_id: u32,
    /// Padding.
    pub _pad: u32,
}

/// ORDER (16 B).
#[repr(C)]
#[derive(Copy, Clone, Debug, PartialEq, Eq, Pod, Zeroable)]
pub struct Order {
    /// O_ENTRY_D.
    pub entry_d: u64,
    /// O_C_ID.
    pub c_id: u32,
    /// O_CARRIER_ID; 0 = null (undelivered).
    pub carrier_id: u8,
    /// O_OL_CNT.
    pub ol_cnt: u8,
    /// O_ALL_LOCAL.
    pub all_local: u8,
    /// Padding.
    pub _pad: u8,
}

/// ORDER-LINE (48 B).
#[repr(C)]
#[derive(Copy, Clone, Debug, PartialEq, Eq, Pod, Zeroable)]
pub struct OrderLine {
    /// OL_DELIVERY_D; 0 = null.
    pub delivery_d: u64,
    /// OL_AMOUNT, cents.
    pub amount: i64,
    /// OL_I_ID.
    pub i_id: u32,
    /// OL_SUPPLY_W_ID.
    pub supply_w_id: u16,
    /// OL_QUANTITY.
    pub quantity: u8,
    /// Padding.
    pub _pad: u8,
    /// OL_DIST_INFO.
    pub dist_info: [u8; 24],
}

/// ITEM (88 B).
#[repr(C)]
#[derive(Copy, Clone, Debug, PartialEq, Eq, Pod, Zeroable)]
pub struct Item {
    /// I_IM_ID.
    pub im_id: u32,
    /// I_PRICE, cents.
    pub price: u32,
    /// I_NAME.
    pub name: [u8; 24],
    /// I_DATA.
    pub data: [u8; 50],
    /// Padding.
    pub _pad: [u8; 6],
}

/// STOCK (308 B).
#[repr(C)]
#[derive(Copy, Clone, Debug, PartialEq, Eq, Pod, Zeroable)]
pub struct Stock {
    /// S_QUANTITY.
    pub quantity: i32,
    /// S_YTD.
    pub ytd: u32,
    /// S_ORDER_CNT.
    pub order_cnt: u32,
    /// S_REMOTE_CNT.
    pub remote_cnt: u32,
    /// S_DIST_01 .. S_DIST_10.
    pub dist: [[u8; 24]; 10],
    /// S_DATA.
    pub data: [u8; 50],
    /// Padding.
    pub _pad: [u8; 2],
}

/// Secondary path (256 B): the customers of one (warehouse, district, last name),
/// ordered by C_FIRST (then C_ID).
#[repr(C)]
#[derive(Copy, Clone, Debug, PartialEq, Eq, Pod, Zeroable)]
pub struct CustomerName {
    /// Entries of `c_ids` in use.
    pub count: u16,
    /// C_IDs, the first `count` in C_FIRST order.
    pub c_ids: [u16; NAME_IDS_MAX],
}

/// Secondary path (8 B): a customer's most recent order.
#[repr(C)]
#[derive(Copy, Clone, Debug, PartialEq, Eq, Pod, Zeroable)]
pub struct LastOrder {
    /// O_ID of the customer's last order.
    pub o_id: u32,
    /// Padding.
    pub _pad: u32,
}

/// Secondary path (8 B): a district's delivery cursor.
#[repr(C)]
#[derive(Copy, Clone, Debug, PartialEq, Eq, Pod, Zeroable)]
pub struct DeliveryCursor {
    /// The oldest undelivered O_ID (the next one Delivery takes).
    pub next_o_id: u32,
    /// A D_NEXT_O_ID that Delivery has seen committed: every O_ID below it has its
    /// NEW-ORDER row until delivered, so Delivery reads DISTRICT only when
    /// `next_o_id` catches up with it.
    pub seen_next_o_id: u32,
}

const _: () = {
    assert!(std::mem::size_of::<Warehouse>() == 96);
    assert!(std::mem::size_of::<District>() == 104);
    assert!(std::mem::size_of::<Customer>() == 672);
    assert!(std::mem::size_of::<History>() == 48);
    assert!(std::mem::size_of::<NewOrder>() == 8);
    assert!(std::mem::size_of::<Order>() == 16);
    assert!(std::mem::size_of::<OrderLine>() == 48);
    assert!(std::mem::size_of::<Item>() == 88);
    assert!(std::mem::size_of::<Stock>() == 308);
    assert!(std::mem::size_of::<CustomerName>() == 256);
    assert!(std::mem::size_of::<LastOrder>() == 8);
    assert!(std::mem::size_of::<DeliveryCursor>() == 8);
};

/// Value bytes of each table, by id.
pub const VALUE_BYTES: [u32; TABLE_COUNT as usize] = [
    std::mem::size_of::<Warehouse>() as u32,
    std::mem::size_of::<District>() as u32,
    std::mem::size_of::<Customer>() as u32,
    std::mem::size_of::<History>() as u32,
    std::mem::size_of::<NewOrder>() as u32,
    std::mem::size_of::<Order>() as u32,
    std::mem::size_of::<OrderLine>() as u32,
    std::mem::size_of::<Item>() as u32,
    std::mem::size_of::<Stock>() as u32,
    std::mem::size_of::<CustomerName>() as u32,
    std::mem::size_of::<LastOrder>() as u32,
    std::mem::size_of::<DeliveryCursor>() as u32,
];

/// The attributes (columns) of table `table`'s value, by id: the spec's columns at their
/// widths (§1.3), in record order, padding as `_pad`; key columns are in the key, not
/// here. Motor §4.2 stores only the attributes a write changed (NewOrder changes
/// DISTRICT's 4-byte D_NEXT_O_ID of its 104 bytes).
pub fn table_attrs(table: u32) -> Vec<Attr> {
    match table {
        WAREHOUSE_ID => attrs!(Warehouse {
            "w_ytd" => ytd,
            "w_tax" => tax,
            "w_name" => name,
            "w_street_1" => address.street_1,
            "w_street_2" => address.street_2,
            "w_city" => address.city,
            "w_state" => address.state,
            "w_zip" => address.zip,
            "_pad" => _pad,
        }),
        DISTRICT_ID => attrs!(District {
            "d_ytd" => ytd,
            "d_tax" => tax,
            "d_next_o_id" => next_o_id,
            "payments" => payments,
            "d_name" => name,
            "d_street_1" => address.street_1,
            "d_street_2" => address.street_2,
            "d_city" => address.city,
            "d_state" => address.state,
            "d_zip" => address.zip,
            "_pad" => _pad,
        }),
        CUSTOMER_ID => attrs!(Customer {
            "c_since" => since,
            "c_credit_lim" => credit_lim,
            "c_balance" => balance,
            "c_ytd_payment" => ytd_payment,
            "c_discount" => discount,
            "c_payment_cnt" => payment_cnt,
            "c_delivery_cnt" => delivery_cnt,
            "c_first" => first,
            "c_middle" => middle,
            "c_last" => last,
            "c_street_1" => address.street_1,
            "c_street_2" => address.street_2,
            "c_city" => address.city,
            "c_state" => address.state,
            "c_zip" => address.zip,
            "c_phone" => phone,
            "c_credit" => credit,
            "c_data" => data,
            "_pad" => _pad,
        }),
        HISTORY_ID => attrs!(History {
            "h_date" => date,
            "h_amount" => amount,
            "h_c_id" => c_id,
            "h_c_w_id" => c_w_id,
            "h_c_d_id" => c_d_id,
            "h_data" => data,
            "_pad" => _pad,
        }),
        NEW_ORDER_ID => attrs!(NewOrder { "no_o_id" => o_id, "_pad" => _pad }),
        ORDER_ID => attrs!(Order {
            "o_entry_d" => entry_d,
            "o_c_id" => c_id,
            "o_carrier_id" => carrier_id,
            "o_ol_cnt" => ol_cnt,
            "o_all_local" => all_local,
            "_pad" => _pad,
        }),
        ORDER_LINE_ID => attrs!(OrderLine {
            "ol_delivery_d" => delivery_d,
            "ol_amount" => amount,
            "ol_i_id" => i_id,
            "ol_supply_w_id" => supply_w_id,
            "ol_quantity" => quantity,
            "_pad" => _pad,
            "ol_dist_info" => dist_info,
        }),
        ITEM_ID => attrs!(Item {
            "i_im_id" => im_id,
            "i_price" => price,
            "i_name" => name,
            "i_data" => data,
            "_pad" => _pad,
        }),
        STOCK_ID => {
            let mut a = attrs!(Stock {
                "s_quantity" => quantity,
                "s_ytd" => ytd,
                "s_order_cnt" => order_cnt,
                "s_remote_cnt" => remote_cnt,
            });
            // S_DIST_01 .. S_DIST_10: one column each.
            let dist = std::mem::offset_of!(Stock, dist) as u32;
            a.extend((0..10u32).map(|i| Attr::new(format!("s_dist_{:02}", i + 1), dist + 24 * i, 24)));
            a.extend(attrs!(Stock { "s_data" => data, "_pad" => _pad }));
            a
        }
        CUSTOMER_NAME_ID => attrs!(CustomerName { "count" => count, "c_ids" => c_ids }),
        LAST_ORDER_ID => attrs!(LastOrder { "o_id" => o_id, "_pad" => _pad }),
        DELIVERY_CURSOR_ID => attrs!(DeliveryCursor {
            "next_o_id" => next_o_id,
            "seen_next_o_id" => seen_next_o_id,
        }),
        _ => panic!("TPC-C has no table {table}"),
    }
}

// ---------------------------------------------------------------------------------------
// Keys (LOTUS §4.2): bits 0..12 hold the critical field, bits 12..64 the other fields.
// ---------------------------------------------------------------------------------------

/// Bits of the shard number (LOTUS §4.2).
pub const SHARD_BITS: u32 = 12;
const SHARD_MASK: u64 = (1 << SHARD_BITS) - 1;
/// Bits of a HISTORY key's per-coordinator sequence number.
pub const HISTORY_SEQ_BITS: u32 = 23;
const HISTORY_COORD_BITS: u32 = 24;

#[inline]
fn pack(shard: u32, upper: u64) -> u64 {
    debug_assert!(upper < 1 << (64 - SHARD_BITS));
    (upper << SHARD_BITS) | (shard as u64 & SHARD_MASK)
}

/// The shard number of a key (its low 12 bits).
#[inline]
pub fn shard(key: u64) -> u32 {
    (key & SHARD_MASK) as u32
}

/// The warehouse of a key whose critical field is a warehouse id (every table but ITEM).
#[inline]
pub fn key_w(key: u64) -> u32 {
    shard(key)
}

#[inline]
fn upper(key: u64) -> u64 {
    key >> SHARD_BITS
}

/// WAREHOUSE key.
#[inline]
pub fn warehouse_key(w: u32) -> u64 {
    pack(w, 0)
}
/// DISTRICT key (also the DELIVERY-CURSOR key).
#[inline]
pub fn district_key(w: u32, d: u32) -> u64 {
    pack(w, d as u64)
}
/// CUSTOMER key (also the LAST-ORDER key).
#[inline]
pub fn customer_key(w: u32, d: u32, c: u32) -> u64 {
    debug_assert!(c < 1 << 12);
    pack(w, (d as u64) << 12 | c as u64)
}
/// CUSTOMER-NAME key; `name` is the last-name number in `0..1000`.
#[inline]
pub fn customer_name_key(w: u32, d: u32, name: u32) -> u64 {
    pack(w, (d as u64) << 12 | name as u64)
}
/// ORDER key (also the NEW-ORDER key).
#[inline]
pub fn order_key(w: u32, d: u32, o: u32) -> u64 {
    pack(w, (d as u64) << 32 | o as u64)
}
/// ORDER-LINE key; `ol` in `1..=15`.
#[inline]
pub fn order_line_key(w: u32, d: u32, o: u32, ol: u32) -> u64 {
    debug_assert!(ol < 16);
    pack(w, (d as u64) << 36 | (o as u64) << 4 | ol as u64)
}
/// ITEM key: no critical field, so the shard is a hash of I_ID (random shards).
#[inline]
pub fn item_key(i: u32) -> u64 {
    pack((key_hash(i as u64) & SHARD_MASK) as u32, i as u64)
}
/// STOCK key: the critical field is the supplying warehouse S_W_ID.
#[inline]
pub fn stock_key(w: u32, i: u32) -> u64 {
    pack(w, i as u64)
}
/// HISTORY key: (H_W_ID, H_D_ID, coordinator, sequence). `coord` is
/// `CoordId::compact() + 1` for run-time rows and 0 for loaded ones (then `seq` = C_ID).
#[inline]
pub fn history_key(w: u32, d: u32, coord: u32, seq: u32) -> u64 {
    debug_assert!(coord < 1 << (HISTORY_COORD_BITS + 1) && seq < 1 << HISTORY_SEQ_BITS);
    pack(
        w,
        (d as u64) << (HISTORY_COORD_BITS + 1 + HISTORY_SEQ_BITS) | (coord as u64) << HISTORY_SEQ_BITS | seq as u64,
    )
}

/// (W, D) of a DISTRICT, DELIVERY-CURSOR or HISTORY key.
#[inline]
pub fn key_wd(table: u32, key: u64) -> (u32, u32) {
    let u = upper(key);
    let d = match table {
        DISTRICT_ID | DELIVERY_CURSOR_ID => u,
        CUSTOMER_ID | LAST_ORDER_ID | CUSTOMER_NAME_ID => u >> 12,
        HISTORY_ID => u >> (HISTORY_COORD_BITS + 1 + HISTORY_SEQ_BITS),
        NEW_ORDER_ID | ORDER_ID => u >> 32,
        ORDER_LINE_ID => u >> 36,
        _ => 0,
    };
    (key_w(key), d as u32)
}
/// (W, D, C) of a CUSTOMER or LAST-ORDER key.
#[inline]
pub fn unpack_customer(key: u64) -> (u32, u32, u32) {
    let u = upper(key);
    (key_w(key), (u >> 12) as u32, (u & 0xfff) as u32)
}
/// (W, D, O) of an ORDER or NEW-ORDER key.
#[inline]
pub fn unpack_order(key: u64) -> (u32, u32, u32) {
    let u = upper(key);
    (key_w(key), (u >> 32) as u32, u as u32)
}
/// (W, D, O, OL_NUMBER) of an ORDER-LINE key.
#[inline]
pub fn unpack_order_line(key: u64) -> (u32, u32, u32, u32) {
    let u = upper(key);
    (key_w(key), (u >> 36) as u32, (u >> 4) as u32, (u & 0xf) as u32)
}

// ---------------------------------------------------------------------------------------
// Random functions (§2.1.5, §2.1.6, §4.3.2).
// ---------------------------------------------------------------------------------------

/// Uniform in `lo..=hi`.
#[inline]
pub fn rand_range<R: Rng + ?Sized>(rng: &mut R, lo: u64, hi: u64) -> u64 {
    debug_assert!(lo <= hi);
    lo + uniform(rng, hi - lo + 1)
}

/// NURand(A, x, y) = (((random(0, A) | random(x, y)) + C) % (y − x + 1)) + x (§2.1.6).
#[inline]
pub fn nurand<R: Rng + ?Sized>(rng: &mut R, a: u64, x: u64, y: u64, c: u64) -> u64 {
    (((rand_range(rng, 0, a) | rand_range(rng, x, y)) + c) % (y - x + 1)) + x
}

/// A of NURand for C_LAST.
pub const A_C_LAST: u64 = 255;
/// A of NURand for C_ID.
pub const A_C_ID: u64 = 1023;
/// A of NURand for OL_I_ID.
pub const A_OL_I_ID: u64 = 8191;

/// The C constants of NURand (§2.1.6): one set at load, one at run time.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct NuRandC {
    /// C for C_LAST.
    pub c_last: u64,
    /// C for C_ID.
    pub c_id: u64,
    /// C for OL_I_ID.
    pub ol_i_id: u64,
}

impl NuRandC {
    /// Load-time constants: each uniform in `0..=A`.
    pub fn load<R: Rng + ?Sized>(rng: &mut R) -> Self {
        Self {
            c_last: rand_range(rng, 0, A_C_LAST),
            c_id: rand_range(rng, 0, A_C_ID),
            ol_i_id: rand_range(rng, 0, A_OL_I_ID),
        }
    }

    /// Run-time constants for `load` (§2.1.6.1): C_LAST's differs from the load-time
    /// one by a delta in 65..=119 other than 96 and 112; C_ID's and OL_I_ID's are free.
    pub fn run<R: Rng + ?Sized>(rng: &mut R, load: &NuRandC) -> Self {
        let c_last = loop {
            let delta = rand_range(rng, 65, 119);
            if delta == 96 || delta == 112 {
                continue;
            }
            // Either side of the load-time C that stays in 0..=255 (one always does).
            let up = load.c_last + delta;
            let down = load.c_last.checked_sub(delta);
            break match (up <= A_C_LAST, down) {
                (true, Some(d)) => {
                    if rng.next_u32() & 1 == 0 {
                        up
                    } else {
                        d
                    }
                }
                (true, None) => up,
                (false, Some(d)) => d,
                (false, None) => unreachable!("255 - 119 > 119"),
            };
        };
        Self {
            c_last,
            c_id: rand_range(rng, 0, A_C_ID),
            ol_i_id: rand_range(rng, 0, A_OL_I_ID),
        }
    }

    /// True when the C_LAST rule of §2.1.6.1 holds between `load` and `self`.
    pub fn c_last_delta_ok(&self, load: &NuRandC) -> bool {
        let delta = self.c_last.abs_diff(load.c_last);
        (65..=119).contains(&delta) && delta != 96 && delta != 112
    }
}

const SYLLABLES: [&[u8]; 10] = [
    b"BAR", b"OUGHT", b"ABLE", b"PRI", b"PRES", b"ESE", b"ANTI", b"CALLY", b"ATION", b"EING",
];

/// C_LAST of last-name number `n` in `0..1000` (§4.3.2.3).
pub fn last_name(n: u32) -> [u8; 16] {
    let mut out = [0u8; 16];
    let mut at = 0;
    for digit in [n / 100, (n / 10) % 10, n % 10] {
        let s = SYLLABLES[digit as usize];
        out[at..at + s.len()].copy_from_slice(s);
        at += s.len();
    }
    out
}

const ALNUM: &[u8; 62] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

/// Fill `out[..len]` with a random a-string of length in `lo..=hi` (§4.3.2.2), zeros after.
pub fn a_string<R: Rng + ?Sized>(rng: &mut R, out: &mut [u8], lo: usize, hi: usize) -> usize {
    let len = rand_range(rng, lo as u64, hi.min(out.len()) as u64) as usize;
    let mut bits = 0u64;
    for (i, b) in out[..len].iter_mut().enumerate() {
        if i % 8 == 0 {
            bits = rng.next_u64();
        }
        *b = ALNUM[((bits & 0xff) as usize * 62) >> 8];
        bits >>= 8;
    }
    out[len..].fill(0);
    len
}

/// Fill `out` with a random n-string (digits).
pub fn n_string<R: Rng + ?Sized>(rng: &mut R, out: &mut [u8]) {
    for b in out.iter_mut() {
        *b = b'0' + uniform(rng, 10) as u8;
    }
}

/// A zip code: 4 random digits then "11111" (§4.3.2.7).
pub fn zip<R: Rng + ?Sized>(rng: &mut R) -> [u8; 9] {
    let mut z = *b"000011111";
    n_string(rng, &mut z[..4]);
    z
}

/// I_DATA or S_DATA: an a-string of 26..=50 with "ORIGINAL" at a random place in 10%
/// of the rows (§4.3.3.1).
pub fn data_50<R: Rng + ?Sized>(rng: &mut R) -> [u8; 50] {
    let mut out = [0u8; 50];
    let len = a_string(rng, &mut out, 26, 50);
    if uniform(rng, 10) == 0 {
        let at = uniform(rng, (len - 8 + 1) as u64) as usize;
        out[at..at + 8].copy_from_slice(b"ORIGINAL");
    }
    out
}

/// A deterministic seed from parts (load-time generators are seeded per entity so each
/// table's loader regenerates exactly what the others saw).
pub fn seed_of(parts: &[u64]) -> u64 {
    let mut h = 0x7470_6363_5f6c_6f61u64;
    for &p in parts {
        h = key_hash(h ^ p).rotate_left(17) ^ p.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
    key_hash(h)
}
