//! The five transactions (§2.4–§2.8), over the `Txn` API. Each `execute` is one round;
//! the module doc's table gives the rounds and RTTs of each.

use std::io::Write as _;

use dmtx_runtime::{Abort, AbortReason, Coordinator, ObjRef, Protocol, TxnHints};

use super::schema::*;
use super::{Tpcc, TpccLocal, Variant, DELIVERY_TXN, NEW_ORDER_TXN, ORDER_STATUS_TXN, PAYMENT_TXN, STOCK_LEVEL_TXN};
use crate::zipf::uniform;
use crate::{Outcome, Workload as _};

/// Reusable buffers of a coordinator (no allocation once warm).
#[derive(Debug, Default)]
pub(crate) struct Scratch {
    lines: Vec<ObjRef<OrderLine>>,
    stocks: Vec<ObjRef<Stock>>,
    i_ids: Vec<u32>,
}

/// Percent of NewOrders that name an unused item and roll back (§2.4.1.4).
const ROLLBACK_PCT: u64 = 1;
/// Percent of order lines supplied by a remote warehouse (§2.4.1.5).
const REMOTE_LINE_PCT: u64 = 1;
/// Percent of Payments to a customer of a remote warehouse (§2.5.1.2).
const REMOTE_PAYMENT_PCT: u64 = 15;
/// Percent of Payments and OrderStatus that look the customer up by last name.
const BY_NAME_PCT: u64 = 60;

fn table_full() -> Abort {
    Abort::new(AbortReason::TableFull)
}

fn now<P: Protocol>(coord: &Coordinator<P>) -> u64 {
    coord.ctx.clock.now_ns().max(1)
}

/// Row ⌈n/2⌉ (1-based) of a CUSTOMER-NAME record.
fn middle_customer(rec: &CustomerName) -> u32 {
    let n = rec.count as usize;
    debug_assert!(n > 0, "every loaded name has a customer");
    rec.c_ids[n.div_ceil(2).max(1) - 1] as u32
}

/// NewOrder's inputs: home warehouse, district, customer, and per order line the
/// item, supplying warehouse and quantity.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(super) struct NewOrderInput {
    w: u32,
    d: u32,
    c: u32,
    ol_cnt: usize,
    rollback: bool,
    i_ids: [u32; OL_CNT_MAX as usize],
    supply: [u32; OL_CNT_MAX as usize],
    qty: [u8; OL_CNT_MAX as usize],
}

/// Payment's inputs, with the HISTORY sequence number it inserts under.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(super) struct PaymentInput {
    w: u32,
    d: u32,
    c_w: u32,
    c_d: u32,
    by_name: bool,
    name_or_id: u32,
    amount: i64,
    seq: u32,
}

/// OrderStatus's inputs (`ford_o`: the order FORD's variant reads).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(super) struct OrderStatusInput {
    w: u32,
    d: u32,
    by_name: bool,
    name_or_id: u32,
    ford_o: u32,
}

/// Delivery's inputs (`ford_o`: the orders FORD's variant delivers).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(super) struct DeliveryInput {
    w: u32,
    carrier: u8,
    ford_o: [u32; DISTRICTS as usize],
}

/// StockLevel's inputs.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(super) struct StockLevelInput {
    w: u32,
    d: u32,
    threshold: i32,
}

/// One TPC-C transaction with its random inputs (the terminal's input screen,
/// §2.4.1–§2.8.1), drawn once and reused by every attempt.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct TpccInput(Input);

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Input {
    NewOrder(NewOrderInput),
    Payment(PaymentInput),
    OrderStatus(OrderStatusInput),
    Delivery(DeliveryInput),
    StockLevel(StockLevelInput),
}

impl TpccInput {
    /// Its transaction type index (into `TXN_TYPES`).
    pub fn type_index(&self) -> usize {
        match self.0 {
            Input::NewOrder(_) => NEW_ORDER_TXN,
            Input::Payment(_) => PAYMENT_TXN,
            Input::OrderStatus(_) => ORDER_STATUS_TXN,
            Input::Delivery(_) => DELIVERY_TXN,
            Input::StockLevel(_) => STOCK_LEVEL_TXN,
        }
    }
}

impl Tpcc {
    /// Draw a transaction of type `ty`.
    pub(super) fn draw_input(&self, ty: usize, local: &mut TpccLocal) -> TpccInput {
        TpccInput(match ty {
            NEW_ORDER_TXN => Input::NewOrder(self.draw_new_order(local)),
            PAYMENT_TXN => Input::Payment(self.draw_payment(local)),
            ORDER_STATUS_TXN => Input::OrderStatus(self.draw_order_status(local)),
            DELIVERY_TXN => Input::Delivery(self.draw_delivery(local)),
            STOCK_LEVEL_TXN => Input::StockLevel(self.draw_stock_level(local)),
            _ => unreachable!("five transaction types"),
        })
    }

    /// Run one attempt of `input`.
    pub(super) async fn run_input<P: Protocol>(
        &self,
        local: &mut TpccLocal,
        input: &TpccInput,
        coord: &mut Coordinator<P>,
    ) -> Result<Outcome, Abort> {
        match &input.0 {
            Input::NewOrder(i) => self.new_order(i, coord).await,
            Input::Payment(i) => self.payment(local, i, coord).await,
            Input::OrderStatus(i) => self.order_status(local, i, coord).await,
            Input::Delivery(i) => self.delivery(local, i, coord).await,
            Input::StockLevel(i) => self.stock_level(local, i, coord).await,
        }
    }

    /// NewOrder's inputs (§2.4.1).
    fn draw_new_order(&self, local: &mut TpccLocal) -> NewOrderInput {
        let w = self.home(local);
        let rng = &mut local.rng;
        let d = 1 + uniform(rng, DISTRICTS as u64) as u32;
        let c = self.nurand_c_id(rng);
        let ol_cnt = rand_range(rng, OL_CNT_MIN as u64, OL_CNT_MAX as u64) as usize;
        let rollback = self.cfg.variant == Variant::Spec && uniform(rng, 100) < ROLLBACK_PCT;
        let mut i_ids = [0u32; OL_CNT_MAX as usize];
        let mut supply = [w; OL_CNT_MAX as usize];
        let mut qty = [0u8; OL_CNT_MAX as usize];
        for l in 0..ol_cnt {
            i_ids[l] = loop {
                let i = self.nurand_i_id(rng);
                if !i_ids[..l].contains(&i) {
                    break i;
                }
            };
            if self.cfg.warehouses > 1 && uniform(rng, 100) < REMOTE_LINE_PCT {
                supply[l] = self.remote(rng, w);
            }
            qty[l] = rand_range(rng, 1, 10) as u8;
        }
        if rollback {
            // The last item is an unused I_ID (§2.4.1.5): not found, the txn rolls back.
            i_ids[ol_cnt - 1] = self.cfg.items + 1;
        }
        NewOrderInput {
            w,
            d,
            c,
            ol_cnt,
            rollback,
            i_ids,
            supply,
            qty,
        }
    }

    /// NewOrder (§2.4).
    pub(super) async fn new_order<P: Protocol>(
        &self,
        input: &NewOrderInput,
        coord: &mut Coordinator<P>,
    ) -> Result<Outcome, Abort> {
        let NewOrderInput {
            w,
            d,
            c,
            ol_cnt,
            rollback,
            i_ids,
            supply,
            qty,
        } = *input;
        let all_local = supply[..ol_cnt].iter().all(|&s| s == w);
        let date = now(coord);

        let mut txn = coord.begin_with(self.txn_hints(NEW_ORDER_TXN));
        let wh = txn.add_ro(WAREHOUSE, warehouse_key(w));
        let di = txn.add_rw(DISTRICT, district_key(w, d));
        let cu = txn.add_ro(CUSTOMER, customer_key(w, d, c));
        let lo = txn.add_rw(LAST_ORDER, customer_key(w, d, c));
        let mut items = [None::<ObjRef<Item>>; OL_CNT_MAX as usize];
        let mut stocks = [None::<ObjRef<Stock>>; OL_CNT_MAX as usize];
        for l in 0..ol_cnt {
            items[l] = Some(txn.add_ro(ITEM, item_key(i_ids[l])));
            if i_ids[l] <= self.cfg.items {
                stocks[l] = Some(txn.add_rw(STOCK, stock_key(supply[l], i_ids[l])));
            }
        }
        if let Err(abort) = txn.execute().await {
            if rollback && abort.reason == AbortReason::NotFound {
                return Ok(Outcome::RolledBack);
            }
            return Err(abort);
        }
        debug_assert!(!rollback, "the unused item was found");

        let o = {
            let dist = txn.get_mut(di);
            if dist.next_o_id > self.cfg.customers + self.orders_per_district() {
                // ORDER, NEW-ORDER and ORDER-LINE were sized for fewer orders.
                txn.coord.ctx.last_table_full = Some(ORDER_LINE_ID);
                return Err(table_full());
            }
            dist.next_o_id += 1;
            dist.next_o_id - 1
        };
        let d_tax = txn.get(di).tax as i64;
        let w_tax = txn.get(wh).tax as i64;
        let discount = txn.get(cu).discount as i64;
        txn.get_mut(lo).o_id = o;
        let or = txn.add_insert(ORDER, order_key(w, d, o));
        let no = txn.add_insert(NEW_ORDER, order_key(w, d, o));
        let mut lines = [None::<ObjRef<OrderLine>>; OL_CNT_MAX as usize];
        for (l, line) in lines[..ol_cnt].iter_mut().enumerate() {
            *line = Some(txn.add_insert(ORDER_LINE, order_line_key(w, d, o, l as u32 + 1)));
        }
        txn.execute().await?;

        *txn.get_mut(or) = Order {
            entry_d: date,
            c_id: c,
            carrier_id: 0,
            ol_cnt: ol_cnt as u8,
            all_local: all_local as u8,
            _pad: 0,
        };
        *txn.get_mut(no) = NewOrder { o_id: o, _pad: 0 };
        let mut total = 0i64;
        for l in 0..ol_cnt {
            let (item, stock, line) = (items[l].unwrap(), stocks[l].unwrap(), lines[l].unwrap());
            let price = txn.get(item).price as i64;
            let q = qty[l];
            let s = txn.get_mut(stock);
            s.quantity = if s.quantity >= q as i32 + 10 {
                s.quantity - q as i32
            } else {
                s.quantity - q as i32 + 91
            };
            s.ytd += q as u32;
            s.order_cnt += 1;
            if supply[l] != w {
                s.remote_cnt += 1;
            }
            let dist_info = s.dist[d as usize - 1];
            let amount = q as i64 * price;
            total += amount;
            *txn.get_mut(line) = OrderLine {
                delivery_d: 0,
                amount,
                i_id: i_ids[l],
                supply_w_id: supply[l] as u16,
                quantity: q,
                _pad: 0,
                dist_info,
            };
        }
        // The terminal's total (§2.4.2.2), computed and not stored.
        std::hint::black_box(total * (10_000 - discount) / 10_000 * (10_000 + w_tax + d_tax) / 10_000);
        txn.commit().await?;
        Ok(Outcome::Committed)
    }

    /// Payment's inputs (§2.5.1).
    fn draw_payment(&self, local: &mut TpccLocal) -> PaymentInput {
        let w = self.home(local);
        let rng = &mut local.rng;
        let d = 1 + uniform(rng, DISTRICTS as u64) as u32;
        let (c_w, c_d) = if self.cfg.warehouses > 1 && uniform(rng, 100) < REMOTE_PAYMENT_PCT {
            (self.remote(rng, w), 1 + uniform(rng, DISTRICTS as u64) as u32)
        } else {
            (w, d)
        };
        let by_name = self.cfg.variant == Variant::Spec && uniform(rng, 100) < BY_NAME_PCT;
        let name_or_id = if by_name {
            self.nurand_c_last(rng)
        } else {
            self.nurand_c_id(rng)
        };
        let amount = rand_range(rng, 100, 500_000) as i64;
        // Each drawn Payment takes its own HISTORY key; its retries reuse it (an aborted
        // attempt inserted nothing). Past the key space the sequence stays put and
        // `payment` reports the table full.
        let seq = local.hist_seq;
        if seq < 1 << HISTORY_SEQ_BITS {
            local.hist_seq += 1;
        }
        PaymentInput {
            w,
            d,
            c_w,
            c_d,
            by_name,
            name_or_id,
            amount,
            seq,
        }
    }

    /// Payment (§2.5).
    pub(super) async fn payment<P: Protocol>(
        &self,
        local: &TpccLocal,
        input: &PaymentInput,
        coord: &mut Coordinator<P>,
    ) -> Result<Outcome, Abort> {
        let PaymentInput {
            w,
            d,
            c_w,
            c_d,
            by_name,
            name_or_id,
            amount,
            seq,
        } = *input;
        if seq >= 1 << HISTORY_SEQ_BITS {
            coord.ctx.last_table_full = Some(HISTORY_ID);
            return Err(table_full());
        }
        let date = now(coord);

        // By id, every key is known before the first execute (the type cannot promise it:
        // by last name, the customer's id is read first).
        let hints = if by_name {
            self.txn_hints(PAYMENT_TXN)
        } else {
            TxnHints::DECLARED
        };
        let mut txn = coord.begin_with(hints);
        let wh = txn.add_rw(WAREHOUSE, warehouse_key(w));
        let di = txn.add_rw(DISTRICT, district_key(w, d));
        let hi = txn.add_insert(HISTORY, history_key(w, d, local.hist_coord, seq));
        let (c, cu) = if by_name {
            let nm = txn.add_ro(CUSTOMER_NAME, customer_name_key(c_w, c_d, name_or_id));
            txn.execute().await?;
            let c = middle_customer(txn.get(nm));
            (c, txn.add_rw(CUSTOMER, customer_key(c_w, c_d, c)))
        } else {
            let c = name_or_id;
            (c, txn.add_rw(CUSTOMER, customer_key(c_w, c_d, c)))
        };
        txn.execute().await?;

        if txn.get(di).payments >= self.payments_per_district() {
            // HISTORY was sized for fewer payments.
            txn.coord.ctx.last_table_full = Some(HISTORY_ID);
            return Err(table_full());
        }
        let w_name = {
            let wr = txn.get_mut(wh);
            wr.ytd += amount;
            wr.name
        };
        let d_name = {
            let dr = txn.get_mut(di);
            dr.ytd += amount;
            dr.payments += 1;
            dr.name
        };
        let cr = txn.get_mut(cu);
        cr.balance -= amount;
        cr.ytd_payment += amount;
        cr.payment_cnt += 1;
        if &cr.credit == b"BC" {
            // C_ID, C_D_ID, C_W_ID, D_ID, W_ID and H_AMOUNT go in front of C_DATA.
            let mut buf = [0u8; 64];
            let len = {
                let mut cur = &mut buf[..];
                let _ = write!(cur, "{c} {c_d} {c_w} {d} {w} {}.{:02} ", amount / 100, amount % 100);
                64 - cur.len()
            };
            let data = &mut cr.data;
            data.copy_within(0..500 - len, len);
            data[..len].copy_from_slice(&buf[..len]);
        }
        // H_DATA = W_NAME, 4 spaces, D_NAME.
        let mut h_data = [0u8; 24];
        h_data[..10].copy_from_slice(&w_name);
        h_data[10..14].copy_from_slice(b"    ");
        h_data[14..].copy_from_slice(&d_name);
        *txn.get_mut(hi) = History {
            date,
            amount,
            c_id: c,
            c_w_id: c_w as u16,
            c_d_id: c_d as u8,
            data: h_data,
            _pad: 0,
        };
        txn.commit().await?;
        Ok(Outcome::Committed)
    }

    /// OrderStatus's inputs (§2.6.1).
    fn draw_order_status(&self, local: &mut TpccLocal) -> OrderStatusInput {
        let w = self.home(local);
        let rng = &mut local.rng;
        let d = 1 + uniform(rng, DISTRICTS as u64) as u32;
        let by_name = self.cfg.variant == Variant::Spec && uniform(rng, 100) < BY_NAME_PCT;
        let name_or_id = if by_name {
            self.nurand_c_last(rng)
        } else {
            self.nurand_c_id(rng)
        };
        let ford_o = rand_range(rng, 1, self.cfg.customers as u64) as u32;
        OrderStatusInput {
            w,
            d,
            by_name,
            name_or_id,
            ford_o,
        }
    }

    /// OrderStatus (§2.6).
    pub(super) async fn order_status<P: Protocol>(
        &self,
        local: &mut TpccLocal,
        input: &OrderStatusInput,
        coord: &mut Coordinator<P>,
    ) -> Result<Outcome, Abort> {
        let OrderStatusInput {
            w,
            d,
            by_name,
            name_or_id,
            ford_o,
        } = *input;
        let scratch = &mut local.scratch;
        let spec = self.cfg.variant == Variant::Spec;

        let mut txn = coord.begin_with(self.txn_hints(ORDER_STATUS_TXN));
        let c = if by_name {
            let nm = txn.add_ro(CUSTOMER_NAME, customer_name_key(w, d, name_or_id));
            txn.execute().await?;
            middle_customer(txn.get(nm))
        } else {
            name_or_id
        };
        let cu = txn.add_ro(CUSTOMER, customer_key(w, d, c));
        let or = if spec {
            let lo = txn.add_ro(LAST_ORDER, customer_key(w, d, c));
            txn.execute().await?;
            let o = txn.get(lo).o_id;
            (o, txn.add_ro(ORDER, order_key(w, d, o)))
        } else {
            (ford_o, txn.add_ro(ORDER, order_key(w, d, ford_o)))
        };
        txn.execute().await?;
        let (o, or) = or;
        let ol_cnt = txn.get(or).ol_cnt as u32;
        scratch.lines.clear();
        for l in 1..=ol_cnt {
            scratch.lines.push(txn.add_ro(ORDER_LINE, order_line_key(w, d, o, l)));
        }
        txn.execute().await?;
        let mut seen = txn.get(cu).balance;
        for &l in &scratch.lines {
            let line = txn.get(l);
            seen = seen.wrapping_add(line.amount ^ line.delivery_d as i64);
        }
        std::hint::black_box(seen);
        txn.commit().await?;
        Ok(Outcome::Committed)
    }

    /// Delivery's inputs (§2.7.1).
    fn draw_delivery(&self, local: &mut TpccLocal) -> DeliveryInput {
        let w = self.home(local);
        let rng = &mut local.rng;
        let carrier = rand_range(rng, 1, 10) as u8;
        let mut ford_o = [0u32; DISTRICTS as usize];
        for o in &mut ford_o {
            *o = rand_range(rng, self.first_new_order() as u64, self.cfg.customers as u64) as u32;
        }
        DeliveryInput { w, carrier, ford_o }
    }

    /// Delivery (§2.7), run in one transaction over the 10 districts.
    pub(super) async fn delivery<P: Protocol>(
        &self,
        local: &mut TpccLocal,
        input: &DeliveryInput,
        coord: &mut Coordinator<P>,
    ) -> Result<Outcome, Abort> {
        let DeliveryInput { w, carrier, ford_o } = *input;
        let scratch = &mut local.scratch;
        let spec = self.cfg.variant == Variant::Spec;
        let date = now(coord);
        const ND: usize = DISTRICTS as usize;

        let mut txn = coord.begin_with(self.txn_hints(DELIVERY_TXN));
        // The order each district delivers, with its ORDER handle.
        let mut target = [None::<(u32, ObjRef<Order>)>; ND];
        let mut cursors = [None::<ObjRef<DeliveryCursor>>; ND];
        if spec {
            for (i, cur) in cursors.iter_mut().enumerate() {
                *cur = Some(txn.add_rw(DELIVERY_CURSOR, district_key(w, i as u32 + 1)));
            }
            txn.execute().await?;
            // Districts whose cursor caught up with the last D_NEXT_O_ID it saw.
            let mut dists = [None::<ObjRef<District>>; ND];
            let mut any = false;
            for (i, dist) in dists.iter_mut().enumerate() {
                let cur = txn.get(cursors[i].unwrap());
                if cur.next_o_id >= cur.seen_next_o_id {
                    *dist = Some(txn.add_ro(DISTRICT, district_key(w, i as u32 + 1)));
                    any = true;
                }
            }
            if any {
                txn.execute().await?;
                for (i, dist) in dists.iter().enumerate() {
                    if let Some(dist) = *dist {
                        let next = txn.get(dist).next_o_id;
                        txn.get_mut(cursors[i].unwrap()).seen_next_o_id = next;
                    }
                }
            }
            for (i, t) in target.iter_mut().enumerate() {
                let cur = *txn.get(cursors[i].unwrap());
                if cur.next_o_id < cur.seen_next_o_id {
                    let o = cur.next_o_id;
                    txn.add_delete(NEW_ORDER, order_key(w, i as u32 + 1, o));
                    *t = Some((o, txn.add_rw(ORDER, order_key(w, i as u32 + 1, o))));
                }
            }
            txn.execute().await?;
        } else {
            for (i, t) in target.iter_mut().enumerate() {
                let o = ford_o[i];
                *t = Some((o, txn.add_rw(ORDER, order_key(w, i as u32 + 1, o))));
            }
            txn.execute().await?;
            for (i, t) in target.iter_mut().enumerate() {
                let (o, or) = t.unwrap();
                if txn.get(or).carrier_id != 0 {
                    // Delivered already: skipped, as FORD skips a missing NEW-ORDER row.
                    *t = None;
                } else {
                    txn.add_delete(NEW_ORDER, order_key(w, i as u32 + 1, o));
                }
            }
        }

        // Lines and customers of the orders delivered.
        scratch.lines.clear();
        let mut line_end = [0usize; ND];
        let mut customers = [None::<ObjRef<Customer>>; ND];
        for (i, t) in target.iter().enumerate() {
            let d = i as u32 + 1;
            if let Some((o, or)) = *t {
                let order = txn.get_mut(or);
                order.carrier_id = carrier;
                let (c, ol_cnt) = (order.c_id, order.ol_cnt as u32);
                for l in 1..=ol_cnt {
                    scratch.lines.push(txn.add_rw(ORDER_LINE, order_line_key(w, d, o, l)));
                }
                customers[i] = Some(txn.add_rw(CUSTOMER, customer_key(w, d, c)));
            }
            line_end[i] = scratch.lines.len();
        }
        txn.execute().await?;
        let (mut delivered, mut skipped) = (0, 0);
        let mut at = 0;
        for i in 0..ND {
            let Some(cu) = customers[i] else {
                skipped += 1;
                continue;
            };
            let mut sum = 0i64;
            for &l in &scratch.lines[at..line_end[i]] {
                let line = txn.get_mut(l);
                line.delivery_d = date;
                sum += line.amount;
            }
            at = line_end[i];
            let cr = txn.get_mut(cu);
            cr.balance += sum;
            cr.delivery_cnt += 1;
            if let Some(cur) = cursors[i] {
                txn.get_mut(cur).next_o_id += 1;
            }
            delivered += 1;
        }
        txn.commit().await?;
        local.delivered += delivered;
        local.deliveries_skipped += skipped;
        Ok(Outcome::Committed)
    }

    /// StockLevel's inputs (§2.8.1).
    fn draw_stock_level(&self, local: &mut TpccLocal) -> StockLevelInput {
        let w = self.home(local);
        let rng = &mut local.rng;
        let d = 1 + uniform(rng, DISTRICTS as u64) as u32;
        let threshold = rand_range(rng, 10, 20) as i32;
        StockLevelInput { w, d, threshold }
    }

    /// StockLevel (§2.8).
    pub(super) async fn stock_level<P: Protocol>(
        &self,
        local: &mut TpccLocal,
        input: &StockLevelInput,
        coord: &mut Coordinator<P>,
    ) -> Result<Outcome, Abort> {
        let StockLevelInput { w, d, threshold } = *input;
        let scratch = &mut local.scratch;

        let mut txn = coord.begin_with(self.txn_hints(STOCK_LEVEL_TXN));
        let di = txn.add_ro(DISTRICT, district_key(w, d));
        txn.execute().await?;
        let next = txn.get(di).next_o_id;
        let first = next - STOCK_LEVEL_ORDERS;
        let mut orders = [None::<ObjRef<Order>>; STOCK_LEVEL_ORDERS as usize];
        for (k, or) in orders.iter_mut().enumerate() {
            *or = Some(txn.add_ro(ORDER, order_key(w, d, first + k as u32)));
        }
        // An ORDER below D_NEXT_O_ID that is not there yet belongs to a NewOrder still
        // committing: `not_found` here is a conflict, and the transaction is retried.
        txn.execute().await?;
        scratch.lines.clear();
        for (k, or) in orders.iter().enumerate() {
            let ol_cnt = txn.get(or.unwrap()).ol_cnt as u32;
            for l in 1..=ol_cnt {
                scratch
                    .lines
                    .push(txn.add_ro(ORDER_LINE, order_line_key(w, d, first + k as u32, l)));
            }
        }
        txn.execute().await?;
        scratch.i_ids.clear();
        scratch.i_ids.extend(scratch.lines.iter().map(|&l| txn.get(l).i_id));
        scratch.i_ids.sort_unstable();
        scratch.i_ids.dedup();
        scratch.stocks.clear();
        for &i in &scratch.i_ids {
            scratch.stocks.push(txn.add_ro(STOCK, stock_key(w, i)));
        }
        txn.execute().await?;
        let low = scratch
            .stocks
            .iter()
            .filter(|&&s| txn.get(s).quantity < threshold)
            .count();
        std::hint::black_box(low);
        txn.commit().await?;
        Ok(Outcome::Committed)
    }
}
