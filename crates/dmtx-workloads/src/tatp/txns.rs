//! The seven transactions (the module doc of `tatp`, "Transactions").

use dmtx_runtime::{Abort, AbortReason, Coordinator, Protocol, Txn};

use crate::Workload as _;
use rand::rngs::SmallRng;

use super::schema::{ACCESS_INFO, CALL_FORWARDING, CF_INDEX, SPECIAL_FACILITY, SUBSCRIBER, SUB_NBR_INDEX};
use super::*;

/// Outcome of a transaction ended by `execute` with `abort`: the spec's "not found" and
/// "duplicate" are unsuccessful, anything else is the protocol's abort.
#[inline]
fn spec_miss(abort: Abort) -> Result<Outcome, Abort> {
    match abort.reason {
        AbortReason::NotFound | AbortReason::Duplicate => Ok(Outcome::Unsuccessful),
        _ => Err(abort),
    }
}

/// Note the first disagreement of a transaction.
#[inline]
fn flag(bad: &mut Option<Anomaly>, ok: bool, what: &'static str, table: u32, key: u64) {
    if !ok && bad.is_none() {
        *bad = Some(Anomaly { what, table, key });
    }
}

/// Commit; on success count `bad` and return `outcome`.
async fn finish<P: Protocol>(
    txn: Txn<'_, P>,
    local: &mut TatpLocal,
    bad: Option<Anomaly>,
    outcome: Outcome,
) -> Result<Outcome, Abort> {
    txn.commit().await?;
    if let Some(a) = bad {
        local.anomalies += 1;
        local.first_anomaly.get_or_insert(a);
    }
    Ok(outcome)
}

/// One TATP transaction with its random inputs (the module doc of `tatp`,
/// "Transactions", names each).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum TatpInput {
    /// GET_SUBSCRIBER_DATA: `s_id`, and a second subscriber with `ro_keys=2`.
    GetSubscriberData(u64, Option<u64>),
    /// GET_NEW_DESTINATION: `s_id`, `sf_type`, `start_time`, `end_time`.
    GetNewDestination(u64, u8, u8, u8),
    /// GET_ACCESS_DATA: `s_id`, `ai_type`.
    GetAccessData(u64, u8),
    /// UPDATE_SUBSCRIBER_DATA: `s_id`, `sf_type`, `bit_1`, `data_a`.
    UpdateSubscriberData(u64, u8, u16, u8),
    /// UPDATE_LOCATION: `s_id` (looked up by its sub_nbr), `vlr_location`.
    UpdateLocation(u64, u32),
    /// INSERT_CALL_FORWARDING: `s_id`, `sf_type`, start-time slot, `end_time`, `numberx`.
    InsertCallForwarding(u64, u8, u8, u8, [u8; 15]),
    /// DELETE_CALL_FORWARDING: `s_id`, `sf_type`, start-time slot.
    DeleteCallForwarding(u64, u8, u8),
}

impl TatpInput {
    /// Its transaction type index (into `TXN_TYPES`).
    pub fn type_index(&self) -> usize {
        match self {
            TatpInput::GetSubscriberData(..) => GSD,
            TatpInput::GetNewDestination(..) => GND,
            TatpInput::GetAccessData(..) => GAD,
            TatpInput::UpdateSubscriberData(..) => USD,
            TatpInput::UpdateLocation(..) => UL,
            TatpInput::InsertCallForwarding(..) => ICF,
            TatpInput::DeleteCallForwarding(..) => DCF,
        }
    }
}

impl Tatp {
    /// Draw a transaction of type `ty` (draws in the order the transactions used to).
    pub(super) fn draw_input(&self, ty: usize, rng: &mut SmallRng) -> TatpInput {
        let s = self.subscriber(rng);
        match ty {
            GSD => TatpInput::GetSubscriberData(s, (self.cfg.ro_keys == 2).then(|| self.other_subscriber(rng, s))),
            GND => {
                let sf_type = 1 + uniform(rng, 4) as u8;
                let start = START_TIMES[uniform(rng, 3) as usize];
                let end = 1 + uniform(rng, END_TIME_MAX as u64) as u8;
                TatpInput::GetNewDestination(s, sf_type, start, end)
            }
            GAD => TatpInput::GetAccessData(s, 1 + uniform(rng, 4) as u8),
            USD => {
                let sf_type = 1 + uniform(rng, 4) as u8;
                let bit_1 = uniform(rng, 2) as u16;
                let data_a = uniform(rng, 256) as u8;
                TatpInput::UpdateSubscriberData(s, sf_type, bit_1, data_a)
            }
            UL => TatpInput::UpdateLocation(s, 1 + uniform(rng, u32::MAX as u64) as u32),
            ICF => {
                let sf_type = 1 + uniform(rng, 4) as u8;
                let slot = uniform(rng, 3) as u8;
                let end = 1 + uniform(rng, END_TIME_MAX as u64) as u8;
                let mut numberx = [0u8; 15];
                for d in numberx.iter_mut() {
                    *d = b'0' + uniform(rng, 10) as u8;
                }
                TatpInput::InsertCallForwarding(s, sf_type, slot, end, numberx)
            }
            DCF => TatpInput::DeleteCallForwarding(s, 1 + uniform(rng, 4) as u8, uniform(rng, 3) as u8),
            _ => unreachable!("pick_type returns an index below {}", TXN_TYPES.len()),
        }
    }

    /// Run one attempt of `input`.
    pub(super) async fn run_input<P: Protocol>(
        &self,
        local: &mut TatpLocal,
        input: &TatpInput,
        coord: &mut Coordinator<P>,
    ) -> Result<Outcome, Abort> {
        match *input {
            TatpInput::GetSubscriberData(s, s2) => self.get_subscriber_data(local, (s, s2), coord).await,
            TatpInput::GetNewDestination(s, f, st, e) => self.get_new_destination(local, (s, f, st, e), coord).await,
            TatpInput::GetAccessData(s, a) => self.get_access_data(local, (s, a), coord).await,
            TatpInput::UpdateSubscriberData(s, f, b, d) => {
                self.update_subscriber_data(local, (s, f, b, d), coord).await
            }
            TatpInput::UpdateLocation(s, v) => self.update_location(local, (s, v), coord).await,
            TatpInput::InsertCallForwarding(s, f, sl, e, n) => {
                self.insert_call_forwarding(local, (s, f, sl, e, n), coord).await
            }
            TatpInput::DeleteCallForwarding(s, f, sl) => self.delete_call_forwarding(local, (s, f, sl), coord).await,
        }
    }

    /// Resolve `nbr` to an s_id: through SUB_NBR_INDEX (one round) or locally.
    async fn lookup<P: Protocol>(
        &self,
        txn: &mut Txn<'_, P>,
        nbr: &[u8; SUB_NBR_DIGITS],
        bad: &mut Option<Anomaly>,
    ) -> Result<u64, Abort> {
        if !self.cfg.sub_nbr_index {
            return Ok(parse_sub_nbr(nbr).expect("sub_nbr is made of digits"));
        }
        let key = sub_nbr_key(nbr);
        let ix = txn.add_ro(SUB_NBR_INDEX, key);
        txn.execute().await?;
        let s_id = txn.get(ix).s_id as u64;
        flag(
            bad,
            sub_nbr(s_id) == *nbr,
            "sub_nbr index names another subscriber",
            SUB_NBR_INDEX_TABLE_ID,
            key,
        );
        Ok(s_id)
    }

    pub(super) async fn get_subscriber_data<P: Protocol>(
        &self,
        local: &mut TatpLocal,
        (s, s2): (u64, Option<u64>),
        coord: &mut Coordinator<P>,
    ) -> Result<Outcome, Abort> {
        let mut txn = coord.begin_with(self.txn_hints(GSD));
        let a = txn.add_ro(SUBSCRIBER, subscriber_key(s));
        let b = s2.map(|s2| txn.add_ro(SUBSCRIBER, subscriber_key(s2)));
        if let Err(e) = txn.execute().await {
            return spec_miss(e);
        }
        let mut bad = None;
        check_subscriber(txn.get(a), s, &mut bad);
        if let (Some(b), Some(s2)) = (b, s2) {
            check_subscriber(txn.get(b), s2, &mut bad);
        }
        finish(txn, local, bad, Outcome::Committed).await
    }

    pub(super) async fn get_new_destination<P: Protocol>(
        &self,
        local: &mut TatpLocal,
        (s, sf_type, start, end): (u64, u8, u8, u8),
        coord: &mut Coordinator<P>,
    ) -> Result<Outcome, Abort> {
        let key = special_facility_key(s, sf_type);
        let mut txn = coord.begin_with(self.txn_hints(GND));
        let sf = txn.add_ro(SPECIAL_FACILITY, key);
        let ix = txn.add_ro(CF_INDEX, key);
        if let Err(e) = txn.execute().await {
            return spec_miss(e);
        }
        let mut bad = None;
        let sfv = *txn.get(sf);
        let ixv = *txn.get(ix);
        flag(
            &mut bad,
            sfv.s_id as u64 == s && sfv.sf_type == sf_type,
            "record fields disagree with its key",
            SPECIAL_FACILITY_TABLE_ID,
            key,
        );
        flag(
            &mut bad,
            ixv.s_id as u64 == s && ixv.sf_type == sf_type && ixv.slots <= 0b111,
            "record fields disagree with its key",
            CF_INDEX_TABLE_ID,
            key,
        );
        let mut found = false;
        if sfv.is_active == 1 {
            // Slots whose start time is at most `start`.
            let candidates = ixv.slots & ((1u8 << (start / 8 + 1)) - 1);
            if candidates != 0 {
                let mut rows = [None; 3];
                for k in population::slots(candidates) {
                    rows[k as usize] = Some(txn.add_ro(
                        CALL_FORWARDING,
                        call_forwarding_key(s, sf_type, START_TIMES[k as usize]),
                    ));
                }
                // A listed row that is gone: a delete committed since the index was read.
                txn.execute().await?;
                for (k, r) in rows.iter().enumerate() {
                    let Some(r) = *r else { continue };
                    let st = START_TIMES[k];
                    let cf = txn.get(r);
                    flag(
                        &mut bad,
                        cf.s_id as u64 == s && cf.sf_type == sf_type && cf.start_time == st,
                        "record fields disagree with its key",
                        CALL_FORWARDING_TABLE_ID,
                        call_forwarding_key(s, sf_type, st),
                    );
                    found |= cf.start_time <= start && end < cf.end_time;
                }
            }
        }
        let outcome = if found {
            Outcome::Committed
        } else {
            Outcome::Unsuccessful
        };
        finish(txn, local, bad, outcome).await
    }

    pub(super) async fn get_access_data<P: Protocol>(
        &self,
        local: &mut TatpLocal,
        (s, ai_type): (u64, u8),
        coord: &mut Coordinator<P>,
    ) -> Result<Outcome, Abort> {
        let key = access_info_key(s, ai_type);
        let mut txn = coord.begin_with(self.txn_hints(GAD));
        let ai = txn.add_ro(ACCESS_INFO, key);
        let sub = (self.cfg.ro_keys == 2).then(|| txn.add_ro(SUBSCRIBER, subscriber_key(s)));
        if let Err(e) = txn.execute().await {
            return spec_miss(e);
        }
        let mut bad = None;
        let v = txn.get(ai);
        flag(
            &mut bad,
            v.s_id as u64 == s && v.ai_type == ai_type,
            "record fields disagree with its key",
            ACCESS_INFO_TABLE_ID,
            key,
        );
        if let Some(sub) = sub {
            check_subscriber(txn.get(sub), s, &mut bad);
        }
        finish(txn, local, bad, Outcome::Committed).await
    }

    pub(super) async fn update_subscriber_data<P: Protocol>(
        &self,
        local: &mut TatpLocal,
        (s, sf_type, bit_1, data_a): (u64, u8, u16, u8),
        coord: &mut Coordinator<P>,
    ) -> Result<Outcome, Abort> {
        let key = special_facility_key(s, sf_type);
        let mut txn = coord.begin_with(self.txn_hints(USD));
        let sub = txn.add_rw(SUBSCRIBER, subscriber_key(s));
        let sf = txn.add_rw(SPECIAL_FACILITY, key);
        if let Err(e) = txn.execute().await {
            return spec_miss(e);
        }
        let mut bad = None;
        check_subscriber(txn.get(sub), s, &mut bad);
        let v = txn.get_mut(sub);
        v.bits = (v.bits & !1) | bit_1;
        v.usd_stamp = v.usd_stamp.wrapping_add(1);
        let v = txn.get_mut(sf);
        flag(
            &mut bad,
            v.s_id as u64 == s && v.sf_type == sf_type,
            "record fields disagree with its key",
            SPECIAL_FACILITY_TABLE_ID,
            key,
        );
        v.data_a = data_a;
        v.usd_stamp = v.usd_stamp.wrapping_add(1);
        finish(txn, local, bad, Outcome::Committed).await
    }

    pub(super) async fn update_location<P: Protocol>(
        &self,
        local: &mut TatpLocal,
        (s, vlr): (u64, u32),
        coord: &mut Coordinator<P>,
    ) -> Result<Outcome, Abort> {
        let nbr = sub_nbr(s);
        let mut bad = None;
        let mut txn = coord.begin_with(self.txn_hints(UL));
        let s_id = match self.lookup(&mut txn, &nbr, &mut bad).await {
            Ok(s_id) => s_id,
            Err(e) => return spec_miss(e),
        };
        let sub = txn.add_rw(SUBSCRIBER, subscriber_key(s_id));
        if let Err(e) = txn.execute().await {
            return spec_miss(e);
        }
        check_subscriber(txn.get(sub), s_id, &mut bad);
        let v = txn.get_mut(sub);
        v.vlr_location = vlr;
        v.ul_stamp = v.ul_stamp.wrapping_add(1);
        finish(txn, local, bad, Outcome::Committed).await
    }

    pub(super) async fn insert_call_forwarding<P: Protocol>(
        &self,
        local: &mut TatpLocal,
        (s, sf_type, slot, end, numberx): (u64, u8, u8, u8, [u8; 15]),
        coord: &mut Coordinator<P>,
    ) -> Result<Outcome, Abort> {
        let nbr = sub_nbr(s);
        let start = START_TIMES[slot as usize];
        let mut bad = None;
        let mut txn = coord.begin_with(self.txn_hints(ICF));
        let s_id = match self.lookup(&mut txn, &nbr, &mut bad).await {
            Ok(s_id) => s_id,
            Err(e) => return spec_miss(e),
        };
        let key = special_facility_key(s_id, sf_type);
        let sf = txn.add_ro(SPECIAL_FACILITY, key);
        let ix = txn.add_rw(CF_INDEX, key);
        let cf = txn.add_insert(CALL_FORWARDING, call_forwarding_key(s_id, sf_type, start));
        if let Err(e) = txn.execute().await {
            return spec_miss(e);
        }
        let sfv = txn.get(sf);
        flag(
            &mut bad,
            sfv.s_id as u64 == s_id && sfv.sf_type == sf_type,
            "record fields disagree with its key",
            SPECIAL_FACILITY_TABLE_ID,
            key,
        );
        let ixv = txn.get_mut(ix);
        flag(
            &mut bad,
            ixv.s_id as u64 == s_id && ixv.sf_type == sf_type,
            "record fields disagree with its key",
            CF_INDEX_TABLE_ID,
            key,
        );
        flag(
            &mut bad,
            ixv.slots & (1 << slot) == 0,
            "an insert succeeded on a slot the index lists",
            CF_INDEX_TABLE_ID,
            key,
        );
        ixv.slots |= 1 << slot;
        *txn.get_mut(cf) = CallForwarding {
            s_id: s_id as u32,
            sf_type,
            start_time: start,
            end_time: end,
            numberx,
            _pad: [0; 2],
        };
        finish(txn, local, bad, Outcome::Committed).await
    }

    pub(super) async fn delete_call_forwarding<P: Protocol>(
        &self,
        local: &mut TatpLocal,
        (s, sf_type, slot): (u64, u8, u8),
        coord: &mut Coordinator<P>,
    ) -> Result<Outcome, Abort> {
        let nbr = sub_nbr(s);
        let start = START_TIMES[slot as usize];
        let mut bad = None;
        let mut txn = coord.begin_with(self.txn_hints(DCF));
        let s_id = match self.lookup(&mut txn, &nbr, &mut bad).await {
            Ok(s_id) => s_id,
            Err(e) => return spec_miss(e),
        };
        let key = special_facility_key(s_id, sf_type);
        let cf_key = call_forwarding_key(s_id, sf_type, start);
        let ix = txn.add_rw(CF_INDEX, key);
        let cf = txn.add_delete(CALL_FORWARDING, cf_key);
        if let Err(e) = txn.execute().await {
            return spec_miss(e);
        }
        let cfv = txn.get(cf);
        flag(
            &mut bad,
            cfv.s_id as u64 == s_id && cfv.sf_type == sf_type && cfv.start_time == start,
            "record fields disagree with its key",
            CALL_FORWARDING_TABLE_ID,
            cf_key,
        );
        let ixv = txn.get_mut(ix);
        flag(
            &mut bad,
            ixv.s_id as u64 == s_id && ixv.sf_type == sf_type,
            "record fields disagree with its key",
            CF_INDEX_TABLE_ID,
            key,
        );
        flag(
            &mut bad,
            ixv.slots & (1 << slot) != 0,
            "a delete found a row the index does not list",
            CF_INDEX_TABLE_ID,
            key,
        );
        ixv.slots &= !(1 << slot);
        finish(txn, local, bad, Outcome::Committed).await
    }
}

/// A SUBSCRIBER row read under `s` names `s` and its sub_nbr.
#[inline]
fn check_subscriber(v: &Subscriber, s: u64, bad: &mut Option<Anomaly>) {
    flag(
        bad,
        v.s_id as u64 == s && v.sub_nbr == sub_nbr(s),
        "record fields disagree with its key",
        SUBSCRIBER_TABLE_ID,
        subscriber_key(s),
    );
}
