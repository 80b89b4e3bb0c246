//! TATP, the Telecom Application Transaction Processing benchmark (IBM/Solid, TATP
//! description v1.0), as FORD §6.1, Motor §7.1, LOTUS §8.1 and OOCC §VIII-B run it:
//! four tables, seven transactions, 80% read-only, records of at most 48 B.
//!
//! # Transactions
//!
//! The mix is the `mix` knob (weights in the order below, normalized); the default is
//! the spec's. `s` is the spec's `NURand(A, 1, P) = ((rnd(0, A) | rnd(1, P)) % P) + 1` (with
//! `A` = 65 535 for `P ≤ 1 M`, 1 048 575 for `P ≤ 10 M`, 2 097 151 above); OOCC §VIII-C
//! draws subscribers the same way. RTTs are FORD's (`dmtx-protocols` `ford` module doc,
//! warm address cache, one coordinator; asserted by the `rtts_per_type_under_ford`
//! test); Motor §7.4 attributes FORD's low TATP median latency to GetSubscriberData
//! and GetAccessData (70% of the mix) taking one RTT, as here.
//!
//! | type | index | % | logic | success (spec) | RTTs on FORD |
//! | --- | --- | --- | --- | --- | --- |
//! | `get_subscriber_data` | 0 | 35 | RO SUBSCRIBER `s` | 100% | 1 |
//! | `get_new_destination` | 1 | 10 | RO SPECIAL_FACILITY and CF_INDEX `(s, sf_type)`; if `is_active`, RO the CALL_FORWARDING rows the index lists with `start_time ≤ st`; success if one has `et < end_time` (`st ∈ {0,8,16}`, `et ∈ 1..=24`) | 23.9% | 3; 2 when it fetches no CALL_FORWARDING row |
//! | `get_access_data` | 2 | 35 | RO ACCESS_INFO `(s, ai_type)` | 62.5% | 1 |
//! | `update_subscriber_data` | 3 | 2 | RW SUBSCRIBER `s` (bit_1) and SPECIAL_FACILITY `(s, sf_type)` (data_a) | 62.5% | 2 |
//! | `update_location` | 4 | 14 | sub_nbr → s_id, RW SUBSCRIBER (vlr_location) | 100% | 4 (2 with `sub_nbr_index=false`) |
//! | `insert_call_forwarding` | 5 | 2 | sub_nbr → s_id; RO SPECIAL_FACILITY, RW CF_INDEX `(s, sf_type)`, insert CALL_FORWARDING `(s, sf_type, st)` with `et ∈ 1..=24` | 31.25% | 5 (4) |
//! | `delete_call_forwarding` | 6 | 2 | sub_nbr → s_id; RW CF_INDEX, delete CALL_FORWARDING `(s, sf_type, st)` | 31.25% | 4 (2) |
//!
//! InsertCallForwarding reads only SPECIAL_FACILITY `(s, sf_type)`, as FORD's code does;
//! the spec selects every facility of `s` first, a read by `s_id` alone that hash
//! storage has no key for (the outcome is the same: the insert needs `(s, sf_type)`).
//!
//! An unsuccessful transaction (per the spec: no row, or a duplicate insert) is
//! [`Outcome::Unsuccessful`]: counted as committed (what the papers count) and apart from
//! `successful` (the spec's qualified throughput). A missing key aborts `execute` with
//! `not_found` and an existing key aborts an insert with `duplicate`; both end the
//! transaction (locks released by the aborted `execute`) and are reported as
//! `Ok(Unsuccessful)`, never as concurrency aborts. GetNewDestination's "no matching
//! row" (SF inactive, or no CALL_FORWARDING row qualifies) commits its reads and is
//! `Unsuccessful` too. An unsuccessful UpdateSubscriberData writes nothing (as in FORD's
//! code: its SPECIAL_FACILITY key is missing, so the whole `execute` aborts).
//!
//! The spec's 23.9% for GetNewDestination does not follow from its own query and
//! population: enumerating them gives `0.625 × 0.85 × 0.2784 = 14.8%` at load
//! ([`GND_LOADED_SUCCESS`]), drifting toward 20.4% as InsertCallForwarding replaces rows
//! with `end_time ∈ 1..=24`. The check reports the measured ratio beside both.
//!
//! # Secondary access paths (storage is hash-only, as in the papers)
//!
//! - **sub_nbr → s_id**: UpdateLocation and Insert/DeleteCallForwarding name the
//!   subscriber by its 15-digit `sub_nbr` string. By default (`sub_nbr_index=true`) it is
//!   looked up in SUB_NBR_INDEX, a load-time read-only table keyed by the string's BCD
//!   packing, as FORD's and Motor's code (`sec_subscriber`, `tatp_txn.cc`) do. Cost on
//!   FORD: one dependent RTT (the SUBSCRIBER key is known only after it) plus one
//!   validation RTT for the RO object in an otherwise write-only transaction: +2 RTTs
//!   for UpdateLocation and DeleteCallForwarding, +1 for InsertCallForwarding (which
//!   validates its SPECIAL_FACILITY read anyway). `sub_nbr_index=false` parses the string
//!   locally (the identity mapping; 0 RTTs, no table).
//! - **The Call_Forwarding rows of a facility**: GetNewDestination joins SPECIAL_FACILITY
//!   with up to three CALL_FORWARDING rows, any of which may be missing, and a missing key
//!   aborts `execute` (FORD's and Motor's code read them and skip empty results). CF_INDEX
//!   (one 8-byte row per SPECIAL_FACILITY row, same key) holds which of the three exist;
//!   Insert/DeleteCallForwarding lock it (RW) beside the row they insert or delete, at no
//!   extra RTT. GetNewDestination reads it in the SPECIAL_FACILITY round and fetches only
//!   listed rows, so its "no row" answer is validated like any read (FORD's code cannot
//!   validate the absence of a row). A listed row that is gone when fetched means a
//!   concurrent delete committed in between: the transaction aborts (`not_found`, a
//!   concurrency abort; validation would have failed).
//!
//! # Keys (LOTUS §4.2)
//!
//! [`pack_key`]: the low 12 bits of every key are the low 12 bits of `s_id` (LOTUS
//! shards by them; "in TATP, the subscriber ID ensures that most transactions involving
//! a single subscriber are processed within one CN"), then 2 bits of `ai_type`/`sf_type`,
//! 2 bits of `start_time / 8`, then the rest of `s_id`. SUB_NBR_INDEX keys are the BCD
//! digits of `sub_nbr` (a function of the string only; never locked, so not sharded).
//!
//! # Population (the spec's)
//!
//! `s_id` in `1..=subscribers`; per subscriber 1–4 ACCESS_INFO rows and 1–4
//! SPECIAL_FACILITY rows of distinct random types, `is_active` 1 for 85%, 0–3
//! CALL_FORWARDING rows per SPECIAL_FACILITY row with distinct start times from
//! {0, 8, 16} and `end_time = start_time + 1..=8`; string and number fields random per
//! the spec. Rows are a hash of `s_id` (`schema.rs`), regenerated by each table's loader
//! and by the check, without per-row allocation. Subscribers: FORD's code 1 M (the
//! default), Motor §7.1 2 M, LOTUS §8.1 3 M.
//!
//! # Variant: `ro_keys=2` (OOCC §VIII-B)
//!
//! OOCC implements "the read-only transactions to include two key reads". With
//! `ro_keys=2` GetSubscriberData reads two distinct NURand subscribers and GetAccessData
//! also reads SUBSCRIBER `s` (same shard, and the spec's 62.5% is kept);
//! GetNewDestination already reads two. A two-key read-only transaction costs a
//! validation RTT on FORD (2 RTTs).
//!
//! # Invariants ([`Tatp::check`])
//!
//! 1. Key sets: SUBSCRIBER holds exactly `1..=P`, ACCESS_INFO, SPECIAL_FACILITY and
//!    CF_INDEX exactly the loaded rows, SUB_NBR_INDEX every `sub_nbr` → its `s_id`.
//! 2. Every record carries its own key fields; fields no transaction writes are as
//!    loaded (bit_1, vlr_location and data_a too while their stamp is 0).
//! 3. Every CALL_FORWARDING row belongs to an existing SPECIAL_FACILITY row, has a start
//!    time in {0, 8, 16} and `end_time` in 1..=24, and CF_INDEX lists exactly the rows
//!    present.
//! 4. `#CALL_FORWARDING = loaded + Σ committed inserts − Σ committed deletes`, counted
//!    per coordinator only after `commit` returned `Ok`.
//! 5. Stamps: a SUBSCRIBER's `usd_stamp` equals the sum of its SPECIAL_FACILITY rows'
//!    (each UpdateSubscriberData writes both), `Σ usd_stamp` and `Σ ul_stamp` equal the
//!    committed UpdateSubscriberData and UpdateLocation counts (all modulo 2^16).
//! 6. No committed transaction read a record inconsistent with its key or the index
//!    (e.g. an insert that succeeded on a slot CF_INDEX listed).
//! 7. No GetSubscriberData or UpdateLocation was unsuccessful (subscribers are never
//!    deleted). Success ratios per type are reported beside the spec's, not enforced
//!    otherwise: they depend on the NURand-weighted population and on run length.

mod check;
pub mod schema;
#[cfg(test)]
mod tests;
mod txns;

use std::sync::OnceLock;

use dmtx_runtime::{Abort, CoordId, Coordinator, KnobError, KnobSpec, Knobs, Protocol, TxnHints};
use dmtx_store::{StoreError, TableSpec};
use rand::rngs::SmallRng;
use rand::SeedableRng;

use crate::workload::invalid;
use crate::zipf::uniform;
use crate::{InvariantError, Outcome, RecordSink, Snapshot, Workload};
use schema::population;
pub use schema::*;
pub use txns::TatpInput;

/// Transaction type names, in `run_one`'s index order.
pub const TXN_TYPES: [&str; 7] = [
    "get_subscriber_data",
    "get_new_destination",
    "get_access_data",
    "update_subscriber_data",
    "update_location",
    "insert_call_forwarding",
    "delete_call_forwarding",
];
const GSD: usize = 0;
const GND: usize = 1;
const GAD: usize = 2;
const USD: usize = 3;
const UL: usize = 4;
const ICF: usize = 5;
const DCF: usize = 6;

/// The spec's mix (percent), in index order.
pub const MIX_PERCENT: [u32; 7] = [35, 10, 35, 2, 14, 2, 2];
/// The spec's expected success ratios, in index order.
pub const SPEC_SUCCESS: [f64; 7] = [1.0, 0.239, 0.625, 0.625, 1.0, 0.3125, 0.3125];
/// GetNewDestination's success ratio on the loaded population, by enumeration of the
/// spec's query and population: `0.625 × 0.85 × 0.278356…`.
pub const GND_LOADED_SUCCESS: f64 = 0.625 * 0.85 * 0.278_356_481_481_481_45;
/// Largest `subscribers` (FORD's `TATP_MAX_SUBSCRIBERS`; s_id fits 32 bits).
pub const MAX_SUBSCRIBERS: u64 = 1_000_000_000;
/// Draws of a second, distinct subscriber (ro_keys=2) before taking the next one.
const DRAW_MAX: u32 = 64;

const SUBSCRIBERS: KnobSpec = KnobSpec {
    name: "subscribers",
    default: "1000000",
    help: "subscribers P (FORD's code: 1000000, Motor: 2000000, LOTUS: 3000000)",
};
const RO_KEYS: KnobSpec = KnobSpec {
    name: "ro_keys",
    default: "1",
    help: "keys of the one-key read-only transactions: 1 (spec) or 2 (OOCC §VIII-B)",
};
const SUB_NBR_INDEX_KNOB: KnobSpec = KnobSpec {
    name: "sub_nbr_index",
    default: "true",
    help: "look sub_nbr up in a read-only index table (FORD's code; +1 RTT) or parse it locally (false)",
};
const MIX: KnobSpec = KnobSpec {
    name: "mix",
    default: "35,10,35,2,14,2,2",
    help: "weights of get_subscriber_data,get_new_destination,get_access_data,update_subscriber_data,update_location,insert_call_forwarding,delete_call_forwarding",
};

/// TATP settings (what the knobs hold).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TatpConfig {
    /// Subscribers P, `1..=MAX_SUBSCRIBERS` (at least 2 with `ro_keys = 2`).
    pub subscribers: u64,
    /// Keys of GetSubscriberData and GetAccessData: 1 or 2.
    pub ro_keys: u8,
    /// Resolve sub_nbr through SUB_NBR_INDEX (true) or locally (false).
    pub sub_nbr_index: bool,
    /// Weights of the transaction types, in index order; their sum is positive.
    pub mix: [u32; 7],
}

impl Default for TatpConfig {
    fn default() -> Self {
        Self {
            subscribers: 1_000_000,
            ro_keys: 1,
            sub_nbr_index: true,
            mix: MIX_PERCENT,
        }
    }
}

/// The NURand `A` of `subscribers`, as the spec sets it.
pub const fn nurand_a(subscribers: u64) -> u64 {
    if subscribers <= 1_000_000 {
        65_535
    } else if subscribers <= 10_000_000 {
        1_048_575
    } else {
        2_097_151
    }
}

/// `NURand(A, 1, P)` from the two uniform draws `r_a ∈ 0..=A` and `r_p ∈ 1..=P`.
#[inline]
pub const fn nurand_of(r_a: u64, r_p: u64, subscribers: u64) -> u64 {
    ((r_a | r_p) % subscribers) + 1
}

/// The TATP workload.
#[derive(Debug)]
pub struct Tatp {
    cfg: TatpConfig,
    a: u64,
    /// Cumulative weights of `cfg.mix`.
    cum: [u32; 7],
    counts: OnceLock<population::Counts>,
}

/// A record a committed transaction read that disagreed with its key or the index.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Anomaly {
    /// What disagreed.
    pub what: &'static str,
    /// Table of the record.
    pub table: u32,
    /// Its key.
    pub key: u64,
}

/// Per-coordinator TATP state.
#[derive(Debug)]
pub struct TatpLocal {
    rng: SmallRng,
    successful: [u64; 7],
    unsuccessful: [u64; 7],
    anomalies: u64,
    first_anomaly: Option<Anomaly>,
}

impl TatpLocal {
    /// Committed and successful transactions by type index.
    pub fn successful(&self) -> &[u64; 7] {
        &self.successful
    }

    /// Unsuccessful transactions (per the spec) by type index.
    pub fn unsuccessful(&self) -> &[u64; 7] {
        &self.unsuccessful
    }

    /// Committed transactions that read an inconsistent record (invariant 6), and the
    /// first such record.
    pub fn anomalies(&self) -> (u64, Option<Anomaly>) {
        (self.anomalies, self.first_anomaly)
    }
}

impl Tatp {
    /// TATP with `cfg`, or the knob that is out of range.
    pub fn new(cfg: TatpConfig) -> Result<Self, KnobError> {
        if cfg.subscribers == 0 || cfg.subscribers > MAX_SUBSCRIBERS {
            return Err(invalid(
                &SUBSCRIBERS,
                cfg.subscribers,
                format!("must be in 1..={MAX_SUBSCRIBERS}"),
            ));
        }
        if !matches!(cfg.ro_keys, 1 | 2) {
            return Err(invalid(&RO_KEYS, cfg.ro_keys, "must be 1 or 2"));
        }
        if cfg.ro_keys == 2 && cfg.subscribers < 2 {
            return Err(invalid(
                &SUBSCRIBERS,
                cfg.subscribers,
                "ro_keys=2 reads two distinct subscribers; use at least 2",
            ));
        }
        let mut cum = [0u32; 7];
        let mut total = 0u32;
        for (c, &w) in cum.iter_mut().zip(&cfg.mix) {
            total = total
                .checked_add(w)
                .filter(|&t| t <= 1_000_000)
                .ok_or_else(|| invalid(&MIX, format!("{:?}", cfg.mix), "weights must sum to at most 1000000"))?;
            *c = total;
        }
        if total == 0 {
            return Err(invalid(
                &MIX,
                format!("{:?}", cfg.mix),
                "at least one weight must be positive",
            ));
        }
        Ok(Self {
            a: nurand_a(cfg.subscribers),
            cfg,
            cum,
            counts: OnceLock::new(),
        })
    }

    /// The settings.
    pub fn config(&self) -> &TatpConfig {
        &self.cfg
    }

    /// Rows the population draws (computed once, in one pass over the subscribers).
    fn counts(&self) -> population::Counts {
        *self.counts.get_or_init(|| population::counts(self.cfg.subscribers))
    }

    /// Rows CALL_FORWARDING holds at load.
    pub fn loaded_call_forwarding(&self) -> u64 {
        self.counts().call_forwarding
    }

    fn parse_mix(raw: &str) -> Result<[u32; 7], KnobError> {
        let mut mix = [0u32; 7];
        let mut n = 0;
        for part in raw.split(',') {
            let w: u32 = part
                .trim()
                .parse()
                .map_err(|e| invalid(&MIX, raw, format!("`{}`: {e}", part.trim())))?;
            if n == 7 {
                n += 1;
                break;
            }
            mix[n] = w;
            n += 1;
        }
        if n != 7 {
            return Err(invalid(
                &MIX,
                raw,
                "expected 7 comma-separated weights, one per transaction type (spec: 35,10,35,2,14,2,2)",
            ));
        }
        Ok(mix)
    }

    /// A transaction type index per the mix.
    #[inline]
    fn pick_type(&self, rng: &mut SmallRng) -> usize {
        let r = uniform(rng, self.cum[6] as u64) as u32;
        self.cum.iter().position(|&c| r < c).unwrap_or(6)
    }

    /// `NURand(A, 1, P)`.
    #[inline]
    fn subscriber(&self, rng: &mut SmallRng) -> u64 {
        let p = self.cfg.subscribers;
        nurand_of(uniform(rng, self.a + 1), 1 + uniform(rng, p), p)
    }

    /// A NURand subscriber other than `s`.
    #[inline]
    fn other_subscriber(&self, rng: &mut SmallRng, s: u64) -> u64 {
        for _ in 0..DRAW_MAX {
            let o = self.subscriber(rng);
            if o != s {
                return o;
            }
        }
        if s == self.cfg.subscribers {
            1
        } else {
            s + 1
        }
    }
}

impl Workload for Tatp {
    type Local = TatpLocal;
    type Input = TatpInput;

    const NAME: &'static str = "tatp";
    const TXN_STEP: &'static str = "tatp.txn";
    const SCALE_KNOB: Option<&'static str> = Some("subscribers");
    const ABOUT: &'static str =
        "TATP (telecom; FORD §6.1, Motor §7.1, LOTUS §8.1, OOCC §VIII-B): 4 tables, 7 transaction types, 80% read-only";
    const KNOBS: &'static [KnobSpec] = &[SUBSCRIBERS, RO_KEYS, SUB_NBR_INDEX_KNOB, MIX];

    fn from_knobs(knobs: &Knobs) -> Result<Self, KnobError> {
        let raw_mix = knobs
            .iter()
            .find(|(k, _)| *k == MIX.name)
            .map_or(MIX.default, |(_, v)| v);
        Self::new(TatpConfig {
            subscribers: knobs.get(&SUBSCRIBERS)?,
            ro_keys: knobs.get(&RO_KEYS)?,
            sub_nbr_index: knobs.get(&SUB_NBR_INDEX_KNOB)?,
            mix: Self::parse_mix(raw_mix)?,
        })
    }

    fn txn_types(&self) -> &'static [&'static str] {
        &TXN_TYPES
    }

    /// The three reads write nothing. GetNewDestination picks its CALL_FORWARDING rows
    /// from the CF_INDEX row it reads, so it cannot declare them. UpdateLocation and the
    /// two CALL_FORWARDING transactions declare their keys only when they parse the
    /// subscriber id from `sub_nbr` (`sub_nbr_index=false`); through SUB_NBR_INDEX they
    /// read it first.
    fn txn_hints(&self, ty: usize) -> TxnHints {
        match ty {
            GSD | GAD => TxnHints::READ_ONLY_DECLARED,
            GND => TxnHints::READ_ONLY,
            USD => TxnHints::DECLARED,
            UL | ICF | DCF if !self.cfg.sub_nbr_index => TxnHints::DECLARED,
            UL | ICF | DCF => TxnHints::NONE,
            _ => unreachable!("seven transaction types"),
        }
    }

    fn tables(&self) -> Vec<TableSpec> {
        let p = self.cfg.subscribers;
        let c = self.counts();
        // CALL_FORWARDING holds at most 3 rows per SPECIAL_FACILITY row; inserts and
        // deletes hover around the loaded count, so a margin suffices.
        let cf_capacity =
            (3 * c.special_facility).min((c.call_forwarding + c.call_forwarding / 4).max(c.call_forwarding + 4096));
        let mut specs = vec![
            TableSpec::new(SUBSCRIBER_TABLE_ID, "subscriber", size_of::<Subscriber>() as u32, p),
            TableSpec::new(
                ACCESS_INFO_TABLE_ID,
                "access_info",
                size_of::<AccessInfo>() as u32,
                c.access_info,
            ),
            TableSpec::new(
                SPECIAL_FACILITY_TABLE_ID,
                "special_facility",
                size_of::<SpecialFacility>() as u32,
                c.special_facility,
            ),
            TableSpec::new(
                CALL_FORWARDING_TABLE_ID,
                "call_forwarding",
                size_of::<CallForwarding>() as u32,
                cf_capacity,
            ),
            TableSpec::new(
                CF_INDEX_TABLE_ID,
                "cf_index",
                size_of::<CfIndex>() as u32,
                c.special_facility,
            ),
        ];
        if self.cfg.sub_nbr_index {
            specs.push(TableSpec::new(
                SUB_NBR_INDEX_TABLE_ID,
                "sub_nbr_index",
                size_of::<SubNbrIndex>() as u32,
                p,
            ));
        }
        specs
            .into_iter()
            .map(|spec| {
                let attrs = schema::table_attrs(spec.id);
                spec.with_attrs(attrs)
            })
            .collect()
    }

    fn load(&self, table: u32, insert: &mut RecordSink<'_>) -> Result<(), StoreError> {
        let p = self.cfg.subscribers;
        match table {
            SUBSCRIBER_TABLE_ID => {
                for s in 1..=p {
                    insert(subscriber_key(s), bytemuck::bytes_of(&population::subscriber(s)))?;
                }
            }
            ACCESS_INFO_TABLE_ID => {
                for s in 1..=p {
                    for t in population::types(population::ai_types(s)) {
                        insert(
                            access_info_key(s, t),
                            bytemuck::bytes_of(&population::access_info(s, t)),
                        )?;
                    }
                }
            }
            SPECIAL_FACILITY_TABLE_ID => {
                for s in 1..=p {
                    for t in population::types(population::sf_types(s)) {
                        insert(
                            special_facility_key(s, t),
                            bytemuck::bytes_of(&population::special_facility(s, t)),
                        )?;
                    }
                }
            }
            CALL_FORWARDING_TABLE_ID => {
                for s in 1..=p {
                    for t in population::types(population::sf_types(s)) {
                        for k in population::slots(population::cf_slots(s, t)) {
                            let row = population::call_forwarding(s, t, k);
                            insert(call_forwarding_key(s, t, row.start_time), bytemuck::bytes_of(&row))?;
                        }
                    }
                }
            }
            CF_INDEX_TABLE_ID => {
                for s in 1..=p {
                    for t in population::types(population::sf_types(s)) {
                        let row = CfIndex {
                            s_id: s as u32,
                            sf_type: t,
                            slots: population::cf_slots(s, t),
                            _pad: [0; 2],
                        };
                        insert(special_facility_key(s, t), bytemuck::bytes_of(&row))?;
                    }
                }
            }
            SUB_NBR_INDEX_TABLE_ID if self.cfg.sub_nbr_index => {
                for s in 1..=p {
                    let row = SubNbrIndex {
                        s_id: s as u32,
                        _pad: [0; 4],
                    };
                    insert(sub_nbr_key(&sub_nbr(s)), bytemuck::bytes_of(&row))?;
                }
            }
            _ => return Err(StoreError::UnknownTable(table)),
        }
        Ok(())
    }

    fn local(&self, _coord: CoordId, seed: u64) -> TatpLocal {
        TatpLocal {
            rng: SmallRng::seed_from_u64(seed),
            successful: [0; 7],
            unsuccessful: [0; 7],
            anomalies: 0,
            first_anomaly: None,
        }
    }

    fn draw(&self, local: &mut TatpLocal) -> (usize, TatpInput) {
        let ty = self.pick_type(&mut local.rng);
        (ty, self.draw_input(ty, &mut local.rng))
    }

    async fn run<P: Protocol>(
        &self,
        local: &mut TatpLocal,
        input: &TatpInput,
        coord: &mut Coordinator<P>,
    ) -> Result<Outcome, Abort> {
        let ty = input.type_index();
        let res = self.run_input(local, input, coord).await;
        // Only the attempt that commits is counted (a retried one left nothing).
        match res {
            Ok(Outcome::Committed) => local.successful[ty] += 1,
            Ok(_) => local.unsuccessful[ty] += 1,
            Err(_) => {}
        }
        res
    }

    fn check(&self, locals: &[TatpLocal], snapshot: &Snapshot) -> Result<String, InvariantError> {
        check::check(self, locals, snapshot)
    }
}
