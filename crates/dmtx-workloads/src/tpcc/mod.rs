//! TPC-C (rev. 5.11) at transaction-logic level, as FORD §6.1, Motor §7.1, LOTUS §8.1,
//! OOCC §VIII and RCBench §6.1 run it: all 9 tables, all 5 transactions, and the
//! consistency conditions of §3.3.2 checked after every run.
//!
//! # Transactions
//!
//! The mix is the `mix` knob, weights normalized: the standard 45/43/4/4/4 by default;
//! OOCC (Table IV) runs 45/40/4/4/4, RCBench (§6.1) NewOrder and Payment only, 50/50.
//! `w` is the home warehouse: uniform over `1..=warehouses`, or bound to the coordinator
//! with `home_warehouse=coordinator` (`CoordId::compact() mod warehouses + 1`).
//!
//! | type | index | spec | logic (spec variant) | RTTs on FORD (warm cache) |
//! | --- | --- | --- | --- | --- |
//! | `new_order` | 0 | 45 | RO WAREHOUSE, CUSTOMER, 5–15 distinct ITEMs; RW DISTRICT, STOCK per line (1% of lines from a remote warehouse), LAST-ORDER; then insert ORDER, NEW-ORDER and the lines. 1% name an unused item and roll back ([`Outcome::RolledBack`]) | 1 + 2 (insert lookup + lock) + validation + commit = 5 |
//! | `payment` | 1 | 43 | RW WAREHOUSE, DISTRICT, CUSTOMER (15% in a remote warehouse; 60% by last name), insert HISTORY; a "BC" customer's C_DATA gets the payment prepended | by id 2 (insert) + commit = 3; by name + 1 (CUSTOMER-NAME) + validation = 5 |
//! | `order_status` | 2 | 4 | RO CUSTOMER (60% by last name), its last order and that order's lines | by id 3 + validation = 4; by name 5 |
//! | `delivery` | 3 | 4 | per district, the oldest undelivered order: delete its NEW-ORDER row, set O_CARRIER_ID, every OL_DELIVERY_D, add Σ OL_AMOUNT to C_BALANCE, C_DELIVERY_CNT + 1; a district with none is skipped and counted | 3 + commit = 4; + 1 RO DISTRICT round + validation when a cursor caught up with its last seen D_NEXT_O_ID |
//! | `stock_level` | 4 | 4 | RO DISTRICT; the ORDERs `[D_NEXT_O_ID − 20, D_NEXT_O_ID)`, their lines, then the home STOCK of each distinct item; counts S_QUANTITY below a threshold in 10..=20 | 4 + validation = 5 |
//!
//! RTTs follow FORD's table (`dmtx-protocols` `ford` module doc): one per `execute`
//! round, two for a round that inserts, one for validation when the transaction read
//! anything read-only (and wrote, or read more than one object), one for commit; an
//! address-cache miss adds one for a locked object. The ford variant's OrderStatus
//! takes 3 (CUSTOMER + ORDER, lines, validation) and its Delivery 3 (ORDERs; NEW-ORDER
//! deletes, lines and customers; commit), 2 when every district is skipped. The
//! warm-cache minimum of each is asserted in `tests.rs`. A key that must exist and
//! does not aborts with `not_found`, so every key a transaction names is known to exist.
//!
//! # Secondary access paths (storage is hash-only, as in the papers)
//!
//! - **Customer by last name**: CUSTOMER-NAME, a load-time table (w, d, C_LAST) → the
//!   C_IDs ordered by C_FIRST (at most 127 per name; the loader redraws a C_LAST that
//!   would overflow one, which at 3000 customers per district has probability ~0). It is
//!   read-only (names never change, customers are never inserted). Cost: one extra RTT
//!   (the CUSTOMER key is known only after it), one more RO object to validate.
//!   Row ⌈n/2⌉ is taken (§2.5.2.2, §2.6.2.2).
//! - **Order lines of an order**: point keys (w, d, o, 1..=O_OL_CNT); O_OL_CNT comes from
//!   the ORDER row, so reading the lines costs one RTT after the ORDER.
//! - **A district's oldest undelivered order**: DELIVERY-CURSOR (w, d) → (next O_ID,
//!   a D_NEXT_O_ID seen committed). Only Delivery writes it. While `next < seen` the
//!   NEW-ORDER row `next` exists (NewOrder inserts it with D_NEXT_O_ID's increment, only
//!   Delivery deletes it, and Delivery holds the cursor's lock); otherwise Delivery reads
//!   DISTRICT (one RTT, one RO object) to refresh `seen`, and skips the district if it
//!   has nothing to deliver. Cost: one RTT (the cursors) before the NEW-ORDER/ORDER round.
//! - **A customer's last order**: LAST-ORDER (w, d, c) → O_ID, written by NewOrder. This
//!   adds one RW record to every NewOrder (no extra RTT: its key is known up front);
//!   OrderStatus reads it in its first round.
//!
//! # Variants (`tpcc_variant`)
//!
//! `spec` (default) is the above. `ford` is the simplified TPC-C of FORD's code (and
//! Motor's, built on it), for comparisons with FORD, Motor and LOTUS numbers: customers
//! are looked up by NURand C_ID, never by last name; OrderStatus reads a random order in
//! `1..=customers` (not the customer's last); Delivery takes a random O_ID among the
//! loaded new orders (`0.7·customers + 1 ..= customers`, 2101..=3000) per district
//! instead of the oldest, reading its ORDER (RW) first and skipping the district if it
//! was delivered already (FORD probes the NEW-ORDER row; a missing key aborts here); no
//! 1% NewOrder rollback. The ford variant deletes NEW-ORDER rows out of order, so the
//! checks that assume FIFO delivery (condition 2's NO part, 3, and the cursor check) are
//! not run for it; condition 5 takes their place.
//!
//! # Keys (LOTUS §4.2)
//!
//! The low 12 bits are the critical field, W_ID (S_W_ID, the supplying warehouse, for
//! STOCK), so `warehouses ≤ 4095` and the low 12 bits hold W_ID whole; the upper 52 bits
//! encode the other key fields (D_ID 4 bits, O_ID 32, OL_NUMBER 4, C_ID 12, I_ID 17).
//! ITEM has no critical field: its low 12 bits are a hash of I_ID (random shards).
//! HISTORY has no primary key; its key is (H_W_ID, H_D_ID, coordinator, sequence) with
//! 25 bits of coordinator (`compact() + 1`, 0 = loaded rows) and a 23-bit sequence per
//! coordinator. See [`schema`].
//!
//! # Population (§4.3.3.1) and sizes
//!
//! `items` ITEMs (100 000); per warehouse `items` STOCK rows and 10 DISTRICTs; per
//! district `customers` CUSTOMERs (3000), as many ORDERs (O_C_ID a permutation) with
//! 5–15 lines each, NEW-ORDER rows for the last 30% (2101..=3000), one HISTORY row per
//! customer. `items` and `customers` below the spec's values are a test scale (the
//! result records them); W_YTD and D_YTD start at the sum of the loaded H_AMOUNTs, as
//! the spec's 300 000.00 and 30 000.00 are at full scale. Records follow the spec's
//! column widths (see [`schema`]); CUSTOMER is the largest, 672 B.
//!
//! Run-time inserts need room decided before the run: `new_orders_max` and
//! `payments_max` (per warehouse, split evenly over its districts) size ORDER,
//! NEW-ORDER, ORDER-LINE and HISTORY. Unless given, they are sized from the run
//! ([`Workload::fit_to_run`]): its `--txns`, or its length at
//! [`TXNS_PER_COORDINATOR_SECOND_MAX`] commits per coordinator per second, each type's
//! share of the mix, and a margin for the busiest district; 30 000 each when the run
//! says nothing. A NewOrder (Payment) that would exceed its district's share aborts with
//! `table_full` (recording the table in `CoordCtx::last_table_full`), and
//! [`Tpcc::check`] then fails with `tpcc_capacity` naming every knob to raise: the run's
//! numbers are not TPC-C's once NewOrders stop.
//!
//! Reserved room costs memory only when used: ORDER, NEW-ORDER and ORDER-LINE are placed
//! by runs of 1024 O_IDs, HISTORY (when the run's coordinators are known) by runs of
//! each coordinator's sequence (`dmtx_store::KeyRuns`), so late records land in
//! segments nobody touched before. Resident memory per replica, with FORD's 40-byte
//! slot header and the default table geometry (75% bucket load): about 21 MB for ITEM,
//! plus per warehouse about 150 MB loaded, plus about 1.4 KB per committed NewOrder
//! (ten 88-byte ORDER-LINE slots, ORDER, NEW-ORDER, at 75% load) and 120 B per
//! Payment attempt (HISTORY's sequence advances on aborts too).
//!
//! # Consistency conditions (§3.3.2), checked by [`Tpcc::check`]
//!
//! 1 W_YTD = Σ D_YTD; 2 D_NEXT_O_ID − 1 = max(O_ID) = max(NO_O_ID); 3 max(NO_O_ID) −
//! min(NO_O_ID) + 1 = NEW-ORDER rows (per district); 4 Σ O_OL_CNT = ORDER-LINE rows;
//! 5 O_CARRIER_ID null ⇔ a NEW-ORDER row exists; 6 O_OL_CNT = the order's lines; 7
//! OL_DELIVERY_D null ⇔ O_CARRIER_ID null; 8 W_YTD = Σ H_AMOUNT; 9 D_YTD = Σ H_AMOUNT;
//! 12 C_BALANCE + C_YTD_PAYMENT = Σ OL_AMOUNT of the customer's delivered lines. Also:
//! ORDER and HISTORY rows = loaded + committed NewOrders and Payments, every LAST-ORDER
//! names the customer's newest order, every cursor the district's oldest NEW-ORDER
//! (spec variant), and no district ran out of its insert budget. Conditions 10 and 11
//! are not checked (10 restates 12 given 8/9's history sums per customer; 11 needs the
//! loaded order counts, which 2 and 3 cover).

mod check;
mod load;
pub mod schema;
mod txns;
pub use txns::TpccInput;

#[cfg(test)]
mod tests;

use dmtx_runtime::{Abort, CoordId, Coordinator, KnobError, KnobSpec, Knobs, Protocol, TxnHints};
use dmtx_store::{KeyRuns, StoreError, TableSpec};
use rand::rngs::SmallRng;
use rand::SeedableRng;

use crate::workload::invalid;
use crate::zipf::uniform;
use crate::{room_per_part, InvariantError, Metric, Outcome, RecordSink, RunHint, Snapshot, TypeCounts, Workload};
use schema::*;

/// Transaction type names, in `run_one`'s index order.
pub const TXN_TYPES: [&str; 5] = ["new_order", "payment", "order_status", "delivery", "stock_level"];
const NEW_ORDER_TXN: usize = 0;
const PAYMENT_TXN: usize = 1;
const ORDER_STATUS_TXN: usize = 2;
const DELIVERY_TXN: usize = 3;
const STOCK_LEVEL_TXN: usize = 4;

/// The spec's mix (§5.2.3 minimums, as every paper runs it): 45/43/4/4/4.
pub const STANDARD_MIX: [u32; 5] = [45, 43, 4, 4, 4];

/// Committed transactions per coordinator per second that no TPC-C run reaches: rooms
/// sized from a run's length assume it. Measured at the defaults (8 warehouses, 16
/// coordinators): about 1 250 on `mem` and 1 800 on `sim` (cx5).
pub const TXNS_PER_COORDINATOR_SECOND_MAX: f64 = 4000.0;

/// O_IDs per run of the placement of ORDER, NEW-ORDER and ORDER-LINE: one segment holds
/// every district's orders of 1024 consecutive O_IDs (6 MB of ORDER-LINE at 8
/// warehouses), so the room for later orders stays untouched until they come.
const ORDER_RUN_LOG2: u8 = 10;
/// ORDER-LINE rows per order on average (O_OL_CNT is uniform in 5..=15).
const LINES_PER_ORDER_MEAN: u64 = 10;
/// Smallest run of HISTORY's per-coordinator sequence.
const HISTORY_RUN_LOG2_MIN: u32 = 10;

/// Seed of the load-time generators and of the NURand C constants (fixed, so every
/// table's loader and every coordinator agree).
const LOAD_SEED: u64 = 0x5450_4343_2d35_3131;

const VARIANT: KnobSpec = KnobSpec {
    name: "tpcc_variant",
    default: "spec",
    help: "spec (TPC-C 5.11 logic) or ford (FORD/Motor's simplified TPC-C: C_ID lookups, random OrderStatus/Delivery orders, no rollback)",
};
const WAREHOUSES: KnobSpec = KnobSpec {
    name: "warehouses",
    default: "8",
    help: "warehouses, 1..=4095 (FORD: 8, Motor: 24, LOTUS: 105)",
};
const HOME_WAREHOUSE: KnobSpec = KnobSpec {
    name: "home_warehouse",
    default: "uniform",
    help: "uniform (each transaction draws its home warehouse) or coordinator (bound to the coordinator)",
};
const MIX: KnobSpec = KnobSpec {
    name: "mix",
    default: "45,43,4,4,4",
    help: "weights of new_order,payment,order_status,delivery,stock_level, normalized (OOCC: 45,40,4,4,4; RCBench: 50,50,0,0,0)",
};
const NEW_ORDERS_MAX: KnobSpec = KnobSpec {
    name: "new_orders_max",
    default: "30000",
    help: "NewOrders the run may commit per warehouse (sizes ORDER, NEW-ORDER, ORDER-LINE); default: sized from the run's length (30000 when unknown)",
};
const PAYMENTS_MAX: KnobSpec = KnobSpec {
    name: "payments_max",
    default: "30000",
    help: "Payments the run may commit per warehouse (sizes HISTORY); default: sized from the run's length (30000 when unknown)",
};
const ITEMS: KnobSpec = KnobSpec {
    name: "items",
    default: "100000",
    help: "ITEM rows and STOCK rows per warehouse, 100..=100000 (spec: 100000; lower is a test scale)",
};
const CUSTOMERS: KnobSpec = KnobSpec {
    name: "customers",
    default: "3000",
    help:
        "customers (and loaded orders) per district, a multiple of 10 in 30..=3000 (spec: 3000; lower is a test scale)",
};

/// Which TPC-C runs (see the module doc).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Variant {
    /// TPC-C 5.11 transaction logic.
    Spec,
    /// FORD's (and Motor's) simplified TPC-C.
    Ford,
}

/// How a transaction's home warehouse is chosen.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum HomeWarehouse {
    /// Uniform over all warehouses, per transaction.
    Uniform,
    /// Fixed per coordinator: `CoordId::compact() mod warehouses + 1`.
    Coordinator,
}

/// TPC-C settings (what the knobs hold).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TpccConfig {
    /// Spec or FORD's simplification.
    pub variant: Variant,
    /// Warehouses, `1..=4095`.
    pub warehouses: u32,
    /// Home-warehouse policy.
    pub home: HomeWarehouse,
    /// Weights of the five transaction types (index order); their sum is positive.
    pub mix: [u32; 5],
    /// NewOrders the run may commit per warehouse.
    pub new_orders_max: u32,
    /// Payments the run may commit per warehouse.
    pub payments_max: u32,
    /// ITEM rows (and STOCK rows per warehouse), `100..=100000`.
    pub items: u32,
    /// Customers per district, a multiple of 10 in `30..=3000`.
    pub customers: u32,
}

impl Default for TpccConfig {
    fn default() -> Self {
        Self {
            variant: Variant::Spec,
            warehouses: 8,
            home: HomeWarehouse::Uniform,
            mix: STANDARD_MIX,
            new_orders_max: 30_000,
            payments_max: 30_000,
            items: 100_000,
            customers: 3000,
        }
    }
}

/// The TPC-C workload.
#[derive(Clone, Debug)]
pub struct Tpcc {
    cfg: TpccConfig,
    /// NURand C constants used by the loader.
    c_load: NuRandC,
    /// NURand C constants used at run time.
    c_run: NuRandC,
    /// Cumulative mix weights.
    mix_cum: [u64; 5],
    /// `new_orders_max` and `payments_max` were given, not derived from the run.
    room_fixed: [bool; 2],
    /// Coordinators of the run, when known: HISTORY is then placed by runs of each
    /// coordinator's sequence.
    coordinators: usize,
}

/// Per-coordinator TPC-C state.
#[derive(Debug)]
pub struct TpccLocal {
    rng: SmallRng,
    /// The bound home warehouse, with `home_warehouse=coordinator`.
    home: Option<u32>,
    /// HISTORY key coordinator field (`compact() + 1`).
    hist_coord: u32,
    /// Next HISTORY sequence number.
    hist_seq: u32,
    committed: [u64; 5],
    rolled_back: u64,
    delivered: u64,
    deliveries_skipped: u64,
    /// Scratch buffers, reused so the hot path does not allocate.
    scratch: txns::Scratch,
}

impl TpccLocal {
    /// Committed transactions by type index.
    pub fn committed(&self) -> &[u64; 5] {
        &self.committed
    }

    /// NewOrders rolled back on purpose (the 1% unused item).
    pub fn rolled_back(&self) -> u64 {
        self.rolled_back
    }

    /// Orders delivered by committed Deliveries.
    pub fn delivered(&self) -> u64 {
        self.delivered
    }

    /// Districts committed Deliveries skipped because they had nothing to deliver.
    pub fn deliveries_skipped(&self) -> u64 {
        self.deliveries_skipped
    }
}

impl Tpcc {
    /// TPC-C with `cfg`, or the knob that is out of range.
    pub fn new(cfg: TpccConfig) -> Result<Self, KnobError> {
        if cfg.warehouses == 0 || cfg.warehouses > WAREHOUSES_MAX {
            return Err(invalid(
                &WAREHOUSES,
                cfg.warehouses,
                format!("must be in 1..={WAREHOUSES_MAX} (W_ID is the 12-bit shard of every key)"),
            ));
        }
        if cfg.mix.iter().map(|&w| w as u64).sum::<u64>() == 0 {
            return Err(invalid(&MIX, "0,0,0,0,0", "at least one weight must be positive"));
        }
        if !(100..=100_000).contains(&cfg.items) {
            return Err(invalid(&ITEMS, cfg.items, "must be in 100..=100000"));
        }
        if !(30..=3000).contains(&cfg.customers) || !cfg.customers.is_multiple_of(10) {
            return Err(invalid(
                &CUSTOMERS,
                cfg.customers,
                "must be a multiple of 10 in 30..=3000",
            ));
        }
        let per_district_max = (1u64 << 32) - 1 - cfg.customers as u64;
        if cfg.new_orders_max as u64 > per_district_max {
            return Err(invalid(&NEW_ORDERS_MAX, cfg.new_orders_max, "O_ID must fit 32 bits"));
        }
        if cfg.payments_max as u64 / DISTRICTS as u64 >= 1 << HISTORY_SEQ_BITS {
            return Err(invalid(
                &PAYMENTS_MAX,
                cfg.payments_max,
                format!("at most {} per district", (1u64 << HISTORY_SEQ_BITS) - 1),
            ));
        }
        let mut rng = SmallRng::seed_from_u64(LOAD_SEED);
        let c_load = NuRandC::load(&mut rng);
        let c_run = NuRandC::run(&mut rng, &c_load);
        let mut mix_cum = [0u64; 5];
        let mut acc = 0;
        for (c, &w) in mix_cum.iter_mut().zip(cfg.mix.iter()) {
            acc += w as u64;
            *c = acc;
        }
        Ok(Self {
            cfg,
            c_load,
            c_run,
            mix_cum,
            room_fixed: [true; 2],
            coordinators: 0,
        })
    }

    /// Expected commits of transaction type `ty` among `txns`.
    fn share(&self, txns: f64, ty: usize) -> f64 {
        txns * self.cfg.mix[ty] as f64 / self.mix_cum[4] as f64
    }

    /// The first HISTORY sequence number a coordinator uses when HISTORY is placed by
    /// runs of `2^k`: run 0 holds the loaded rows (sequence = C_ID), so run-time rows
    /// start in run 1 and no segment holds more than it was sized for.
    fn history_seq_first(k: u32) -> u64 {
        1 << k
    }

    /// HISTORY's placement and capacity when the coordinators are known: runs of
    /// `2^k` values of every coordinator's sequence share a segment, `k` large enough
    /// that run 0 holds all the loaded rows (sequence = C_ID) within its designed load.
    /// Sequences advance on aborted Payments too, so the room assumes up to one abort
    /// per commit.
    fn history_runs(&self) -> Option<(KeyRuns, u64)> {
        if self.coordinators == 0 {
            return None;
        }
        let coords = self.coordinators as u64;
        let dists = self.cfg.warehouses as u64 * DISTRICTS as u64;
        let loaded = dists * self.cfg.customers as u64;
        let k = loaded
            .div_ceil(coords)
            .max(self.cfg.customers as u64 + 1)
            .next_power_of_two()
            .trailing_zeros()
            .clamp(HISTORY_RUN_LOG2_MIN, HISTORY_SEQ_BITS - 2);
        let records_per_run = coords << k;
        let seq_max = (Self::history_seq_first(k) + (2 * self.payments_per_district() as u64 * dists).div_ceil(coords))
            .min(1 << HISTORY_SEQ_BITS);
        let segments = (seq_max >> k) + 1;
        let runs = KeyRuns {
            seq_shift: SHARD_BITS as u8,
            seq_bits: HISTORY_SEQ_BITS as u8,
            run_log2: k as u8,
            records_per_run,
        };
        Some((runs, segments * records_per_run))
    }

    /// The settings.
    pub fn config(&self) -> &TpccConfig {
        &self.cfg
    }

    /// The NURand C constants: (load time, run time).
    pub fn nurand_c(&self) -> (NuRandC, NuRandC) {
        (self.c_load, self.c_run)
    }

    /// NewOrders a district may commit during the run.
    fn orders_per_district(&self) -> u32 {
        self.cfg.new_orders_max.div_ceil(DISTRICTS)
    }

    /// Payments a district may commit during the run.
    fn payments_per_district(&self) -> u32 {
        self.cfg.payments_max.div_ceil(DISTRICTS)
    }

    /// The first O_ID with a loaded NEW-ORDER row (2101 at full scale).
    fn first_new_order(&self) -> u32 {
        self.cfg.customers / 10 * 7 + 1
    }

    /// A transaction type index per the normalized mix.
    fn pick_type(&self, rng: &mut SmallRng) -> usize {
        let x = uniform(rng, self.mix_cum[4]);
        self.mix_cum.iter().position(|&c| x < c).expect("x < total")
    }

    /// This transaction's home warehouse.
    fn home(&self, local: &mut TpccLocal) -> u32 {
        match local.home {
            Some(w) => w,
            None => 1 + uniform(&mut local.rng, self.cfg.warehouses as u64) as u32,
        }
    }

    /// A warehouse other than `w`, uniform (`w` itself when there is only one).
    fn remote(&self, rng: &mut SmallRng, w: u32) -> u32 {
        if self.cfg.warehouses == 1 {
            return w;
        }
        let r = 1 + uniform(rng, self.cfg.warehouses as u64 - 1) as u32;
        if r >= w {
            r + 1
        } else {
            r
        }
    }

    /// NURand C_ID in `1..=customers`.
    fn nurand_c_id(&self, rng: &mut SmallRng) -> u32 {
        nurand(rng, A_C_ID, 1, self.cfg.customers as u64, self.c_run.c_id) as u32
    }

    /// NURand last-name number at run time, over the names the load produced.
    fn nurand_c_last(&self, rng: &mut SmallRng) -> u32 {
        nurand(rng, A_C_LAST, 0, self.names() as u64 - 1, self.c_run.c_last) as u32
    }

    /// NURand OL_I_ID in `1..=items`.
    fn nurand_i_id(&self, rng: &mut SmallRng) -> u32 {
        nurand(rng, A_OL_I_ID, 1, self.cfg.items as u64, self.c_run.ol_i_id) as u32
    }

    /// Distinct last names per district (1000 at full scale).
    fn names(&self) -> u32 {
        self.cfg.customers.min(NAMES)
    }

    fn parse_mix(raw: &str) -> Result<[u32; 5], KnobError> {
        let parts: Vec<&str> = raw.split(',').map(str::trim).collect();
        if parts.len() != 5 {
            return Err(invalid(
                &MIX,
                raw,
                "five comma-separated weights: new_order,payment,order_status,delivery,stock_level",
            ));
        }
        let mut mix = [0u32; 5];
        for (m, p) in mix.iter_mut().zip(parts) {
            *m = p
                .parse()
                .map_err(|_| invalid(&MIX, raw, format!("`{p}` is not a non-negative integer weight")))?;
        }
        Ok(mix)
    }
}

impl Workload for Tpcc {
    type Local = TpccLocal;
    type Input = TpccInput;

    const NAME: &'static str = "tpcc";
    const TXN_STEP: &'static str = "tpcc.txn";
    const SCALE_KNOB: Option<&'static str> = Some("warehouses");
    const ABOUT: &'static str =
        "TPC-C 5.11 (9 tables, 5 transactions, 45/43/4/4/4), or FORD's simplified variant; consistency conditions checked";
    const KNOBS: &'static [KnobSpec] = &[
        VARIANT,
        WAREHOUSES,
        HOME_WAREHOUSE,
        MIX,
        NEW_ORDERS_MAX,
        PAYMENTS_MAX,
        ITEMS,
        CUSTOMERS,
    ];

    fn from_knobs(knobs: &Knobs) -> Result<Self, KnobError> {
        let variant = match knobs.get::<String>(&VARIANT)?.as_str() {
            "spec" => Variant::Spec,
            "ford" => Variant::Ford,
            other => return Err(invalid(&VARIANT, other, "must be `spec` or `ford`")),
        };
        let home = match knobs.get::<String>(&HOME_WAREHOUSE)?.as_str() {
            "uniform" => HomeWarehouse::Uniform,
            "coordinator" => HomeWarehouse::Coordinator,
            other => return Err(invalid(&HOME_WAREHOUSE, other, "must be `uniform` or `coordinator`")),
        };
        let given = |spec: &KnobSpec| knobs.iter().any(|(k, _)| k == spec.name);
        let room_fixed = [given(&NEW_ORDERS_MAX), given(&PAYMENTS_MAX)];
        let mut t = Self::new(TpccConfig {
            variant,
            warehouses: knobs.get(&WAREHOUSES)?,
            home,
            mix: Self::parse_mix(&knobs.get::<String>(&MIX)?)?,
            new_orders_max: knobs.get(&NEW_ORDERS_MAX)?,
            payments_max: knobs.get(&PAYMENTS_MAX)?,
            items: knobs.get(&ITEMS)?,
            customers: knobs.get(&CUSTOMERS)?,
        })?;
        t.room_fixed = room_fixed;
        Ok(t)
    }

    fn txn_types(&self) -> &'static [&'static str] {
        &TXN_TYPES
    }

    /// OrderStatus and StockLevel write nothing. No type declares every key up front in
    /// the spec variant: NewOrder's ORDER, NEW-ORDER and ORDER-LINE keys carry the order
    /// id it reads from DISTRICT; OrderStatus, Delivery and StockLevel choose orders,
    /// lines and stock from what they read; Payment by last name reads the customer's id
    /// first. In FORD's variant every Payment is by id and declares its keys.
    fn txn_hints(&self, ty: usize) -> TxnHints {
        match ty {
            NEW_ORDER_TXN | DELIVERY_TXN => TxnHints::NONE,
            PAYMENT_TXN if self.cfg.variant == Variant::Ford => TxnHints::DECLARED,
            PAYMENT_TXN => TxnHints::NONE,
            ORDER_STATUS_TXN | STOCK_LEVEL_TXN => TxnHints::READ_ONLY,
            _ => unreachable!("five transaction types"),
        }
    }

    fn tables(&self) -> Vec<TableSpec> {
        let w = self.cfg.warehouses as u64;
        let dists = w * DISTRICTS as u64;
        let n = self.cfg.customers as u64;
        // ORDER, NEW-ORDER and ORDER-LINE are placed by runs of O_ID (every district's
        // orders of one run share a segment), one segment per run up to the last O_ID.
        let run = 1u64 << ORDER_RUN_LOG2;
        let order_segments = (n + self.orders_per_district() as u64) / run + 1;
        let order_runs = KeyRuns {
            seq_shift: SHARD_BITS as u8,
            seq_bits: 32,
            run_log2: ORDER_RUN_LOG2,
            records_per_run: dists * run,
        };
        let line_runs = KeyRuns {
            seq_shift: SHARD_BITS as u8,
            seq_bits: 36,
            run_log2: ORDER_RUN_LOG2 + 4,
            records_per_run: dists * run * LINES_PER_ORDER_MEAN,
        };
        let history = self.history_runs();
        (0..TABLE_COUNT)
            .map(|t| {
                let spec = |capacity: u64| {
                    TableSpec::new(t, TABLE_NAMES[t as usize], VALUE_BYTES[t as usize], capacity)
                        .with_attrs(schema::table_attrs(t))
                };
                match t {
                    WAREHOUSE_ID => spec(w),
                    DISTRICT_ID | DELIVERY_CURSOR_ID => spec(dists),
                    CUSTOMER_ID | LAST_ORDER_ID => spec(dists * n),
                    HISTORY_ID => match history {
                        Some((runs, capacity)) => spec(capacity).growing(dists * n, PAYMENTS_MAX.name).with_runs(runs),
                        None => spec(dists * (n + self.payments_per_district() as u64))
                            .growing(dists * n, PAYMENTS_MAX.name),
                    },
                    NEW_ORDER_ID => spec(order_segments * order_runs.records_per_run)
                        .growing(dists * (n - self.first_new_order() as u64 + 1), NEW_ORDERS_MAX.name)
                        .with_runs(order_runs),
                    ORDER_ID => spec(order_segments * order_runs.records_per_run)
                        .growing(dists * n, NEW_ORDERS_MAX.name)
                        .with_runs(order_runs),
                    ORDER_LINE_ID => spec(order_segments * line_runs.records_per_run)
                        .growing(dists * n * LINES_PER_ORDER_MEAN, NEW_ORDERS_MAX.name)
                        .with_runs(line_runs),
                    ITEM_ID => spec(self.cfg.items as u64),
                    STOCK_ID => spec(w * self.cfg.items as u64),
                    CUSTOMER_NAME_ID => spec(dists * self.names() as u64),
                    _ => unreachable!("table ids are below TABLE_COUNT"),
                }
            })
            .collect()
    }

    /// `new_orders_max` and `payments_max`, unless given, from the run's length: the
    /// expected commits of each type at [`TXNS_PER_COORDINATOR_SECOND_MAX`] (or among
    /// `--txns`), with [`room_per_part`]'s margin for the busiest district.
    fn fit_to_run(mut self, hint: &RunHint) -> Self {
        self.coordinators = hint.coordinators;
        let Some(txns) = hint.txns_max(TXNS_PER_COORDINATOR_SECOND_MAX) else {
            return self;
        };
        let dists = self.cfg.warehouses as u64 * DISTRICTS as u64;
        let per_warehouse = |expected: f64, per_district_max: u64| -> u32 {
            let room = room_per_part(expected, dists).min(per_district_max);
            (room * DISTRICTS as u64).min(u32::MAX as u64) as u32
        };
        if !self.room_fixed[0] {
            let o_id_max = u32::MAX as u64 - 1 - self.cfg.customers as u64;
            self.cfg.new_orders_max = per_warehouse(self.share(txns, NEW_ORDER_TXN), o_id_max / DISTRICTS as u64);
        }
        if !self.room_fixed[1] {
            let seq_max = (1u64 << HISTORY_SEQ_BITS) - 1;
            self.cfg.payments_max = per_warehouse(self.share(txns, PAYMENT_TXN), seq_max - 1);
        }
        self
    }

    fn load(&self, table: u32, insert: &mut RecordSink<'_>) -> Result<(), StoreError> {
        load::load(self, table, insert)
    }

    fn local(&self, coord: CoordId, seed: u64) -> TpccLocal {
        let compact = coord.compact();
        TpccLocal {
            rng: SmallRng::seed_from_u64(seed),
            home: match self.cfg.home {
                HomeWarehouse::Uniform => None,
                HomeWarehouse::Coordinator => Some(compact % self.cfg.warehouses + 1),
            },
            hist_coord: compact + 1,
            hist_seq: self
                .history_runs()
                .map_or(0, |(r, _)| Self::history_seq_first(r.run_log2 as u32) as u32),
            committed: [0; 5],
            rolled_back: 0,
            delivered: 0,
            deliveries_skipped: 0,
            scratch: txns::Scratch::default(),
        }
    }

    fn draw(&self, local: &mut TpccLocal) -> (usize, TpccInput) {
        let ty = self.pick_type(&mut local.rng);
        (ty, self.draw_input(ty, local))
    }

    async fn run<P: Protocol>(
        &self,
        local: &mut TpccLocal,
        input: &TpccInput,
        coord: &mut Coordinator<P>,
    ) -> Result<Outcome, Abort> {
        let res = self.run_input(local, input, coord).await;
        // Only the attempt that ends the transaction is counted (a retried one left
        // nothing).
        match res {
            Ok(Outcome::RolledBack) => local.rolled_back += 1,
            Ok(_) => local.committed[input.type_index()] += 1,
            Err(_) => {}
        }
        res
    }

    /// tpmC (TPC-C §5.4.1): NewOrders per minute of the measured run, over
    /// `warehouses`.
    fn metrics(&self, counts: &[TypeCounts], elapsed_s: f64) -> Vec<Metric> {
        let new_orders = counts.get(NEW_ORDER_TXN).copied().unwrap_or_default();
        let per_min = if elapsed_s > 0.0 {
            (new_orders.committed + new_orders.rolled_back) as f64 * 60.0 / elapsed_s
        } else {
            0.0
        };
        vec![
            Metric {
                name: "tpmc",
                value: per_min,
                about: format!(
                    "NewOrders per minute (rolled back ones included, TPC-C §5.4.1), {} warehouses",
                    self.cfg.warehouses
                ),
            },
            Metric {
                name: "warehouses",
                value: self.cfg.warehouses as f64,
                about: "TPC-C scale".to_string(),
            },
        ]
    }

    fn check(&self, locals: &[TpccLocal], snapshot: &Snapshot) -> Result<String, InvariantError> {
        check::check(self, locals, snapshot)
    }
}

#[cfg(test)]
mod room_tests {
    //! Room for run-time inserts: sized from the run, knobs win, exhausted budgets named.

    use std::time::Duration;

    use dmtx_protocols::ford::FordLayout;
    use dmtx_runtime::AbortReason;

    use super::*;
    use crate::testkit;

    fn tpcc(pairs: &[&str]) -> Tpcc {
        Tpcc::from_knobs(&Knobs::parse(pairs.iter().copied()).unwrap()).unwrap()
    }

    fn for_secs(secs: u64) -> RunHint {
        RunHint {
            duration: Some(Duration::from_secs(secs)),
            txns: None,
            coordinators: 16,
        }
    }

    fn capacity(w: &Tpcc, table: u32) -> u64 {
        w.tables()[table as usize].capacity
    }

    #[test]
    fn room_grows_with_the_run_and_costs_nothing_until_used() {
        let short = tpcc(&[]).fit_to_run(&for_secs(10));
        let long = tpcc(&[]).fit_to_run(&for_secs(600));
        // 10 min at the bound: 600 s x 16 x 4000 x 45% = 17.3 M NewOrders over 80 districts.
        assert!(
            long.cfg.new_orders_max as f64 >= 17.28e6 / 8.0,
            "{}",
            long.cfg.new_orders_max
        );
        assert!(
            long.cfg.payments_max as f64 >= 16.5e6 / 8.0,
            "{}",
            long.cfg.payments_max
        );
        for t in [ORDER_ID, NEW_ORDER_ID, ORDER_LINE_ID, HISTORY_ID] {
            assert!(
                capacity(&long, t) > 30 * capacity(&short, t),
                "table {}: {} vs {}",
                TABLE_NAMES[t as usize],
                capacity(&long, t),
                capacity(&short, t)
            );
        }
        // What loading writes does not depend on the room (within a segment's rounding).
        let layout = FordLayout {};
        for (a, b) in short.tables().iter().zip(long.tables().iter()) {
            let (fa, fb) = (dmtx_store::footprint(a, &layout), dmtx_store::footprint(b, &layout));
            assert!(
                fb.loaded_bytes <= fa.loaded_bytes + (8 << 20),
                "table {}: loaded {} B for a 10 s run, {} B for 10 min",
                a.name,
                fa.loaded_bytes,
                fb.loaded_bytes
            );
        }
        // A run stopping on a count gets room for that count.
        let counted = tpcc(&[]).fit_to_run(&RunHint {
            duration: None,
            txns: Some(8000),
            coordinators: 16,
        });
        assert!(counted.cfg.new_orders_max < 30_000 && counted.orders_per_district() as f64 >= 8000.0 * 0.45 / 80.0);
    }

    #[test]
    fn history_run_0_holds_only_the_loaded_rows() {
        let w = tpcc(&[]).fit_to_run(&for_secs(600));
        let (runs, _) = w.history_runs().unwrap();
        let first = Tpcc::history_seq_first(runs.run_log2 as u32);
        assert!(
            first > w.cfg.customers as u64,
            "loaded sequences 1..={} reach run 1",
            w.cfg.customers
        );
        assert!(runs.records_per_run >= 80 * w.cfg.customers as u64);
        let local = w.local(
            CoordId {
                cn: 0,
                thread: 1,
                coroutine: 2,
            },
            1,
        );
        assert_eq!(local.hist_seq as u64, first);
    }

    #[test]
    fn explicit_knobs_win_over_the_run() {
        let w = tpcc(&["new_orders_max=5000", "payments_max=7000"]).fit_to_run(&for_secs(600));
        assert_eq!((w.cfg.new_orders_max, w.cfg.payments_max), (5000, 7000));
        let w = tpcc(&["new_orders_max=5000"]).fit_to_run(&for_secs(600));
        assert_eq!(w.cfg.new_orders_max, 5000);
        assert!(w.cfg.payments_max > 1_000_000);
        // No hint of the run's length: the knobs' defaults.
        let w = tpcc(&[]).fit_to_run(&RunHint::default());
        assert_eq!((w.cfg.new_orders_max, w.cfg.payments_max), (30_000, 30_000));
    }

    #[test]
    fn growing_tables_name_their_knob() {
        let w = tpcc(&[]);
        for spec in w.tables() {
            let knob = match spec.id {
                ORDER_ID | NEW_ORDER_ID | ORDER_LINE_ID => Some("new_orders_max"),
                HISTORY_ID => Some("payments_max"),
                _ => None,
            };
            assert_eq!(spec.growth_knob, knob, "{}", spec.name);
        }
    }

    /// Goal: the check names every budget that ran out, not the first. Method: budgets
    /// of one NewOrder and one Payment per district, a mix of both, and enough of each.
    #[test]
    fn every_exhausted_budget_is_named() {
        let w = tpcc(&[
            "warehouses=1",
            "items=1000",
            "customers=60",
            "mix=1,1,0,0,0",
            "new_orders_max=10",
            "payments_max=10",
        ]);
        let r = testkit::run_under_ford(&w, 1, 120, 71);
        assert!(r.aborts.get(&AbortReason::TableFull).copied().unwrap_or(0) > 0, "{r:?}");
        let e = w.check(&r.locals, &r.snapshot).unwrap_err();
        assert_eq!(e.invariant, "tpcc_capacity");
        let msg = e.to_string();
        assert!(msg.contains("raise `new_orders_max`"), "{msg}");
        assert!(msg.contains("raise `payments_max`"), "{msg}");
    }

    /// Goal: the run-sized placement (HISTORY by coordinator sequence, orders by O_ID)
    /// keeps every consistency condition. Method: a small database sized for four
    /// coordinators, run under FORD, checked.
    #[test]
    fn a_run_sized_database_passes_the_check() {
        let w = tpcc(&["warehouses=2", "items=1000", "customers=60"]).fit_to_run(&RunHint {
            duration: None,
            txns: Some(400),
            coordinators: 4,
        });
        assert!(w.history_runs().is_some());
        let r = testkit::run_under_ford(&w, 4, 100, 72);
        assert_eq!(r.aborts.get(&AbortReason::TableFull), None, "{r:?}");
        w.check(&r.locals, &r.snapshot).unwrap();
    }
}
